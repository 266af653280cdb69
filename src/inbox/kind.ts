import type { Transaction } from 'kysely';
import type { Static, TObject, TSchema } from 'typebox';
import type { DeferredWrites } from '../db/dialect.js';
import type { InboxTables } from './schema.js';
import type { MessageKey } from './message-key.js';
import type { TraceHeaders } from './tracing.js';

/**
 * A command kind: declared once, run exactly once per message by every transport (HTTP, AMQP). It
 * names the consumer whose inbox records it, the schema of its data and of its outcome, and its work:
 * either work inside the claim's database transaction (the claim, the work and the outcome commit
 * together; several messages may share a transaction), or a side effect outside the database (an
 * email), recorded in two phases (two-phase.ts).
 */
interface KindBase<S extends TObject, O extends TSchema> {
  /** The consumer: part of the inbox key, so each consumer processes a message once. */
  readonly consumer: string;
  /** Names the schemas in the OpenAPI document (`<name> envelope`, `<name> result`). */
  readonly name: string;
  readonly data: S;
  readonly outcome: O;
  /**
   * Canonical form of validated data (e.g. lower-case uuids): what is fingerprinted and applied. Without
   * it the data is fingerprinted and applied as validated.
   */
  normalize?(data: Static<S>): Static<S>;
}

/** One message as the work sees it. */
export interface WorkItem<D> {
  readonly data: D;
  readonly key: MessageKey;
  /**
   * The W3C trace context of the message's claim, while tracing (undefined otherwise): events the work
   * writes to an outbox keep it, so their consumers continue the same trace.
   */
  readonly trace?: TraceHeaders | undefined;
}

/**
 * Work inside the claim's transaction, on the application's database `DB` (its schema holds the inbox's
 * tables; the claim transaction hands the work that same transaction).
 */
export interface TransactionalKind<
  S extends TObject = TObject,
  O extends TSchema = TSchema,
  DB extends InboxTables = InboxTables,
> extends KindBase<S, O> {
  readonly kind: 'transaction';
  /**
   * The work for one message, on the claim's transaction. Writes that nothing in the work reads back
   * may go to `writes`: they run with the inbox's completion, in one statement where the dialect allows.
   * In one statement, two writes to the same row would not both take effect: defer at most one write per
   * row (in a batch run by `run`, each message's writes are flushed before the next message runs).
   */
  run(trx: Transaction<DB>, item: WorkItem<Static<S>>, now: Date, writes: DeferredWrites): Promise<Static<O>>;
  /**
   * The work for several claimed messages in one transaction, outcomes in the order given. It must
   * decide exactly as `run` called for each item in that order would, and defer at most one write per
   * row for the whole batch (sum the items' changes to a row into one write). Without it, a batch runs
   * `run` for each item in turn on the batch's transaction.
   */
  runBatch?(trx: Transaction<DB>, items: readonly WorkItem<Static<S>>[], now: Date, writes: DeferredWrites): Promise<Static<O>[]>;
}

/** What the claim transaction needs of a transactional kind: its consumer and its work. */
export type TransactionalWork = Pick<TransactionalKind, 'consumer' | 'run' | 'runBatch'>;

/** What a side effect is told about the attempt it makes. */
export interface Attempt {
  /** `<consumer>:<messageId>`: the same on every attempt, so the receiver can deduplicate. */
  downstreamKey: string;
  /** 1 for the first attempt; more when an expired attempt is taken over. */
  number: number;
}

/** A side effect that cannot join the transaction, recorded in two phases (two-phase.ts). */
export interface TwoPhaseKind<S extends TObject = TObject, O extends TSchema = TSchema> extends KindBase<S, O> {
  readonly kind: 'two-phase';
  /** The effect's receiver deduplicates by the downstream key, so an expired attempt may be repeated. */
  readonly resendIsSafe: boolean;
  /** Performs the effect; throws EffectNotPerformedError or EffectOutcomeUnknownError (errors.ts). */
  perform(data: Static<S>, attempt: Attempt): Promise<Static<O>>;
}

export type CommandKind<S extends TObject = TObject, O extends TSchema = TSchema, DB extends InboxTables = InboxTables> =
  TransactionalKind<S, O, DB> | TwoPhaseKind<S, O>;
