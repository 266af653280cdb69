/**
 * The inbox: commands delivered at least once take effect exactly once, the key claimed in the same
 * database transaction as the work. The public entry of the core (`…/inbox`): what an application
 * declares and calls. The transports are src/adapters/fastify (HTTP) and src/adapters/amqp (RabbitMQ);
 * the mechanisms behind them are in machinery.ts (`…/inbox/machinery`). See docs/inbox.md.
 */

// The tables, their migrations, and the store over them.
export type { DeadLetterRow, DeadLettersTable, InboxDb, InboxRow, InboxTable, InboxTables, InboxTx, JsonColumn } from './schema.js';
export { addDeadLetterDetail, createInboxTables, dropInboxTables, inboxMigrations } from './migrations.js';
export { InboxStore, type Completion, type InboxStoreOptions, type RowsOfOutcome } from './store.js';
export type { AttemptKey, Claim, InboxKey, InboxRecord, Settlement } from './inbox.repository.js';
export type { DeadLetter, NewDeadLetter } from './dead-letter.repository.js';
export type { BatchOptions, TablePruneResult } from './retention.js';

// Command kinds: what an application declares, and what running one answers.
export type { Attempt, CommandKind, TransactionalKind, TwoPhaseKind, WorkItem } from './kind.js';
export type { DeferredWrites } from '../db/dialect.js';
export type { InboxResult } from './context.js';
export type { CommandExecutor } from './runner.js';
export type { MessageKey } from './message-key.js';
export type { KeySource } from './key-sources.js';
export type { TraceHeaders } from './tracing.js';
export { downstreamKey } from './two-phase.js';

// On MariaDB, Kysely's MysqlDialect with the adapter that names the server `mariadb` in telemetry.
export { MariadbDialect } from '../db/dialect.js';

// What a side effect throws, and the refusals the inbox answers with.
export {
  EffectNotPerformedError,
  EffectOutcomeUnknownError,
  FingerprintMismatchError,
  InboxError,
  InFlightError,
  NeedsReconciliationError,
  OverloadedError,
  SideEffectNotPerformedError,
  SideEffectOutcomeUnknownError,
} from './errors.js';
