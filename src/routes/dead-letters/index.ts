/** The /dead-letters routes: letters listed and read, grouped, searched, replayed and discarded. */
export { deadLetterActionRoutes } from './dead-letter-actions.routes.js';
export { deadLetterRoutes } from './dead-letters.routes.js';
