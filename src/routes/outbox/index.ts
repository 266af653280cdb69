/** The /outbox routes: pending events, the same by book, and this replica's relay. */
export { outboxRoutes } from './outbox-events.routes.js';
export { relayRoutes } from './relay.routes.js';
