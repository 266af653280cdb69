/**
 * The inbox's machinery: the mechanisms its public entry (index.ts) is built from (the decision, the
 * claim transaction, batching, group commit, the two-phase record, the duplicate cache, keys and their
 * sources, the command schemas, the repositories behind the store, retention), for an application that
 * assembles its own transport or operator tools from them (listing records, replaying dead letters).
 * Published as `…/inbox/machinery`; unlike the public entry it may change in a
 * minor version. See docs/inbox.md.
 */

export {
  type DeadLetterRow,
  type DeadLettersTable,
  type InboxDb,
  type InboxRow,
  type InboxTable,
  type InboxTables,
  type InboxTx,
  type JsonColumn,
} from './schema.js';
export { addDeadLetterDetail, createInboxTables, dropInboxTables, inboxMigrations } from './migrations.js';
export { type Completion, InboxStore } from './store.js';
export {
  type AttemptKey,
  type Claim,
  findInboxRecord,
  type InboxKey,
  type InboxRecord,
  inProgressByConsumer,
  listInboxRecords,
  type Settlement,
  toInboxRecord,
} from './inbox.repository.js';
export {
  type DeadLetter,
  findDeadLetter,
  insertDeadLetter,
  listDeadLetters,
  type NewDeadLetter,
  toDeadLetter,
} from './dead-letter.repository.js';
export {
  type Attempt,
  type CommandKind,
  type TransactionalKind,
  type TransactionalWork,
  type TwoPhaseKind,
  type WorkItem,
} from './kind.js';
export { DeferredWrites } from '../db/dialect.js';
export { completedRecord, type Delivery, type InboxContext, type InboxResult, retryAfterSeconds } from './context.js';
export { answer, type Answer, decide, decideTransactional, type Decision, type RecordPolicy, TRANSACTIONAL } from './decide.js';
export { type ClaimSplit, claimTransaction, type Committed, processClaimed, processOnce } from './claim.js';
export { type BatchRunner, Lane, type LaneOptions, settle } from './lane.js';
export { GROUP_COMMIT_DEFAULTS, type GroupCommitOptions, GroupCommitter } from './group-commit.js';
export { downstreamKey, processTwoPhase, type TwoPhaseOptions, type TwoPhaseResult } from './two-phase.js';
export { type CommandExecutor, CommandRunner, type CommandRunnerOptions } from './runner.js';
export { DuplicateCache, type DuplicateCacheOptions } from './duplicate-cache.js';
export { fingerprint } from './fingerprint.js';
export {
  EffectNotPerformedError,
  EffectOutcomeUnknownError,
  errorMessage,
  FingerprintMismatchError,
  InboxError,
  InFlightError,
  NeedsReconciliationError,
  OverloadedError,
  SideEffectNotPerformedError,
  SideEffectOutcomeUnknownError,
} from './errors.js';
export {
  KEY_SOURCES,
  type KeyCandidates,
  type KeySource,
  KeySourceError,
  parseIdempotencyKeyHeader,
  resolveMessageKey,
} from './key-sources.js';
export {
  CONSUMER_NAME_PATTERN,
  isRecordedMessageId,
  isValidConsumerName,
  isValidMessageId,
  isValidProducerId,
  MESSAGE_ID_MAX_LENGTH,
  MESSAGE_ID_PATTERN,
  type MessageKey,
  producerOfKey,
  PRODUCER_ID_PATTERN,
  RECORDED_MESSAGE_ID_PATTERN,
  sameKeySpace,
  scopedMessageId,
  scopeKey,
} from './message-key.js';
export {
  cloudEventSchema,
  type CommandExamples,
  type Envelope,
  envelopeSchema,
  KeySourceSchema,
  MessageId,
  normalizeUuid,
  RecordedMessageId,
  Uuid,
} from './command-schemas.js';
export { type BatchOptions, keyRememberedUntil, pruneTable, retentionCutoff, type TablePruneResult } from './retention.js';
export { activeTracer, extractTraceContext, traceHeadersOf, type TraceHeaders } from './tracing.js';
