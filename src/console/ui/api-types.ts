/**
 * The answers of the admin routes the console calls, derived from the routes' own TypeBox schemas, so
 * the page and the service cannot drift apart. Type-only imports: nothing of the server reaches the bundle.
 */
import type { Static } from 'typebox';
import type {
  GroupProgress as GroupProgressSchema,
  GroupSchema,
  LetterSchema,
  ReplayResultSchema,
} from '../../routes/dead-letters/dead-letter-actions.schemas.js';
import type { InboxRecordSchema } from '../../routes/inbox/inbox-records.schemas.js';
import type { EventSchema } from '../../routes/inbox/record-events.schemas.js';
import type { StuckRecord as StuckRecordSchema } from '../../routes/inbox/stuck-records.schemas.js';
import type { PendingBookSchema, RelaySchema } from '../../routes/outbox/relay.schemas.js';
import type { Overview as OverviewSchema } from '../../routes/overview/overview.schemas.js';

/** GET /overview. */
export type Overview = Static<typeof OverviewSchema>;
/** An item of GET /inbox/needs-reconciliation. */
export type StuckRecord = Static<typeof StuckRecordSchema>;
/** GET /inbox/{consumer}/{messageId}. */
export type InboxRecord = Static<typeof InboxRecordSchema>;
/** An item of GET /inbox/{consumer}/{messageId}/events. */
export type OutboxEvent = Static<typeof EventSchema>;
/** An item of GET /dead-letters/groups. */
export type Group = Static<typeof GroupSchema>;
/** An item of GET /dead-letters/search and GET /dead-letters/groups/letters. */
export type Letter = Static<typeof LetterSchema>;
/** POST /dead-letters/{id}/replay. */
export type ReplayResult = Static<typeof ReplayResultSchema>;
/** POST /dead-letters/groups/replay and /discard. */
export type GroupProgress = Static<typeof GroupProgressSchema>;
/** An item of GET /outbox/books. */
export type PendingBook = Static<typeof PendingBookSchema>;
/** GET /outbox/relay. */
export type Relay = Static<typeof RelaySchema>;
