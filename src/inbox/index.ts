/**
 * The inbox: commands delivered at least once take effect exactly once, the key claimed in the same
 * database transaction as the work. The public entry of the core; the adapters are
 * src/adapters/fastify (HTTP) and src/adapters/amqp (RabbitMQ). See docs/inbox.md.
 */

// The tables, their migrations, and the store over them.
export type { DeadLetterRow, DeadLettersTable, InboxDb, InboxRow, InboxTable, InboxTables, InboxTx, JsonColumn } from './schema.js';
export { addDeadLetterDetail, createInboxTables, dropInboxTables, inboxMigrations } from './migrations.js';
export { InboxStore, type Completion } from './store.js';
export type { AttemptKey, Claim, InboxKey, InboxRecord, Settlement } from './inbox.repository.js';
export type { DeadLetter, NewDeadLetter } from './dead-letter.repository.js';

// Command kinds: what an application declares.
export type { Attempt, CommandKind, TransactionalKind, TransactionalWork, TwoPhaseKind, WorkItem } from './kind.js';
export { DeferredWrites } from '../db/dialect.js';

// Deliveries, the decision, and the mechanisms that run them.
export { completedRecord, retryAfterSeconds, type Delivery, type InboxContext, type InboxResult } from './context.js';
export { answer, decide, decideTransactional, TRANSACTIONAL, type Answer, type Decision, type RecordPolicy } from './decide.js';
export { claimTransaction, processClaimed, processOnce, type ClaimSplit, type Committed } from './claim.js';
export { Lane, settle, type BatchRunner, type LaneOptions } from './lane.js';
export { GroupCommitter, type GroupCommitOptions } from './group-commit.js';
export { downstreamKey, processTwoPhase, type TwoPhaseOptions, type TwoPhaseResult } from './two-phase.js';
export { CommandRunner, type CommandExecutor, type CommandRunnerOptions } from './runner.js';
export { DuplicateCache, type DuplicateCacheOptions } from './duplicate-cache.js';
export { fingerprint } from './fingerprint.js';

// Refusals.
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

// Keys: where senders put a message's identity, and what a key may be.
export {
  KEY_SOURCES,
  KeySourceError,
  parseIdempotencyKeyHeader,
  resolveMessageKey,
  type KeyCandidates,
  type KeySource,
} from './key-sources.js';
export { isValidMessageId, MESSAGE_ID_MAX_LENGTH, MESSAGE_ID_PATTERN, scopeKey, scopedMessageId, type MessageKey } from './message-key.js';
export { cloudEventSchema, envelopeSchema, MessageId, normalizeUuid, Uuid, type Envelope } from './command-schemas.js';

// Retention.
export { keyRememberedUntil, pruneTable, retentionCutoff, type BatchOptions, type TablePruneResult } from './retention.js';
