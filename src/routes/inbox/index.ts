/** The /inbox routes: records listed, read and settled, pruned, the ones to settle, and a record's events. */
export { inboxRoutes } from './inbox-records.routes.js';
export { pruneRoutes } from './prune.routes.js';
export { recordEventRoutes } from './record-events.routes.js';
export { stuckRecordRoutes } from './stuck-records.routes.js';
