import type { Kysely } from 'kysely';
import type { DeferredWrites } from '../db/dialect.js';
import { insertDeadLetter, type NewDeadLetter } from './dead-letter.repository.js';
import {
  claimKeys,
  completeAttempt,
  completeClaims,
  endAttemptLease,
  findInboxRecord,
  findInboxRecords,
  recordLateOutcome,
  releaseClaim,
  settleByOperator,
  takeOverClaim,
  type AttemptKey,
  type Claim,
  type InboxKey,
  type InboxRecord,
  type Settlement,
} from './inbox.repository.js';
import { pruneCompletedInbox, pruneDeadLetters, type BatchOptions, type TablePruneResult } from './retention.js';
import type { InboxDb, InboxTables, InboxTx } from './schema.js';

/** A completion: a claimed key and the outcome its work recorded. */
export interface Completion {
  readonly messageId: string;
  readonly outcome: unknown;
}

/** Writes the rows a side effect's outcome leads to, on the transaction that records that outcome. */
export type RowsOfOutcome = (trx: InboxTx) => Promise<void>;

export interface InboxStoreOptions {
  /**
   * Runs inside a claim transaction once its completions are written, just before its commit, once
   * per message in the order completed: where a test delays a commit or crashes before it.
   */
  beforeCommit?: ((message: { readonly consumer: string; readonly messageId: string }) => Promise<void>) | undefined;
}

/**
 * The inbox's store: every read and write the inbox makes, on any Kysely database whose schema holds
 * the inbox tables (schema.ts), on PostgreSQL, PGlite or SQL Server. The SQL is in inbox.repository.ts
 * and dead-letter.repository.ts; the decision, the claim transaction and the lane only ever call this.
 */
export class InboxStore {
  readonly db: InboxDb;
  readonly #beforeCommit: InboxStoreOptions['beforeCommit'];

  constructor(db: Kysely<InboxTables>, options: InboxStoreOptions = {}) {
    this.db = db;
    this.#beforeCommit = options.beforeCommit;
  }

  /** Runs `work` in a transaction on the inbox's database. */
  transaction<T>(work: (trx: InboxTx) => Promise<T>): Promise<T> {
    return this.db.transaction().execute(work);
  }

  /** Claims keys of one consumer in one statement, in key order; the message ids this call claimed. */
  claim(trx: InboxTx, claims: readonly Claim[]): Promise<Set<string>> {
    return claimKeys(trx, claims);
  }

  /** Marks claimed keys completed with their outcomes, through the transaction's deferred writes. */
  async complete(
    writes: DeferredWrites,
    trx: InboxTx,
    consumer: string,
    completions: readonly Completion[],
    completedAt: Date,
  ): Promise<void> {
    await completeClaims(writes, trx, consumer, completions, completedAt);
    const hook = this.#beforeCommit;
    if (hook === undefined) return;
    // The completion is the transaction's last write: flushed, so the hook runs with every write done.
    await writes.flush();
    for (const { messageId } of completions) await hook({ consumer, messageId });
  }

  find(key: InboxKey): Promise<InboxRecord | undefined> {
    return findInboxRecord(this.db, key);
  }

  findMany(consumer: string, messageIds: readonly string[]): Promise<InboxRecord[]> {
    return findInboxRecords(this.db, consumer, messageIds);
  }

  /** Records a message that must not be applied; its id. */
  deadLetter(letter: NewDeadLetter): Promise<string> {
    return insertDeadLetter(this.db, letter);
  }

  /**
   * Phase 2 of a two-phase attempt; false when the record is no longer this attempt's. With `rows`, the
   * outcome and the rows it writes commit in one transaction, the rows only if the record was this attempt's.
   */
  async completeAttempt(key: AttemptKey, outcome: unknown, completedAt: Date, rows?: RowsOfOutcome): Promise<boolean> {
    if (rows === undefined) return (await completeAttempt(this.db, key, outcome, completedAt)) === 1;
    return this.transaction(async (trx) => {
      if ((await completeAttempt(trx, key, outcome, completedAt)) !== 1) return false;
      await rows(trx);
      return true;
    });
  }

  /** Ends an attempt's lease (its outcome unknown); false when the record is no longer this attempt's. */
  endLease(key: AttemptKey, at: Date): Promise<boolean> {
    return endAttemptLease(this.db, key, at);
  }

  /** Deletes an in-progress record held under `key.attempts` (with `leaseEndedBy`, only once its lease ran out). */
  release(key: AttemptKey, leaseEndedBy?: Date): Promise<boolean> {
    return releaseClaim(this.db, key, leaseEndedBy);
  }

  /**
   * An operator settles a record that needs reconciliation (in progress, its lease over at `at`), read
   * under `key.attempts`: `{ resolution: 'completed', outcome }` records the outcome the operator gives
   * (the effect happened; later copies are answered with it), `{ resolution: 'released' }` deletes the
   * record (the next delivery runs the command again). False when the record is no longer that attempt's
   * (taken over, completed, or settled meanwhile) or its lease still runs: read it again.
   */
  settle(key: AttemptKey, settlement: Settlement, at: Date): Promise<boolean> {
    return settleByOperator(this.db, key, settlement, at);
  }

  /** Takes over an expired in-progress record; true for exactly one of several copies that try at once. */
  takeOver(record: InboxRecord, leaseUntil: Date): Promise<boolean> {
    return takeOverClaim(this.db, record, leaseUntil);
  }

  /** Records the outcome of an attempt whose record was released while it ran; false when a new claim exists. */
  recordLateOutcome(claim: Claim, attempts: number, outcome: unknown, completedAt: Date, rows?: RowsOfOutcome): Promise<boolean> {
    if (rows === undefined) return recordLateOutcome(this.db, claim, attempts, outcome, completedAt);
    return this.transaction(async (trx) => {
      if (!(await recordLateOutcome(trx, claim, attempts, outcome, completedAt))) return false;
      await rows(trx);
      return true;
    });
  }

  /** Deletes completed records and dead letters older than their cutoffs, in bounded batches. */
  async prune(
    cutoffs: { inbox: Date; deadLetters: Date },
    options: BatchOptions,
  ): Promise<{ inbox: TablePruneResult; deadLetters: TablePruneResult }> {
    const inbox = await pruneCompletedInbox(this.db, cutoffs.inbox, options);
    const deadLetters = await pruneDeadLetters(this.db, cutoffs.deadLetters, options);
    return { inbox, deadLetters };
  }
}
