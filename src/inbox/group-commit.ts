import { setTimeout as sleep } from 'node:timers/promises';
import type { Tx } from '../db/database.js';
import { DeferredWrites, isTransactionConflict } from '../db/dialect.js';
import type { DuplicateCache } from './duplicate-cache.js';
import { InFlightError, NeedsReconciliationError, OverloadedError } from './errors.js';
import { claimKeys, completeClaims, findInboxRecords, type InboxRecord } from './inbox.repository.js';
import type { MessageKey } from './message-key.js';
import {
  assertSamePayload,
  completedRecord,
  processOnce,
  retryAfterSeconds,
  type InboxCommand,
  type InboxContext,
  type InboxResult,
} from './process-once.js';

/** One message as a consumer's work sees it. */
export interface WorkItem<D> {
  readonly data: D;
  readonly key: MessageKey;
}

/** A consumer of the inbox: its name (part of the key) and its work. */
export interface InboxHandler<D, O> {
  readonly consumer: string;
  /**
   * The work for one message; runs on the claim's transaction. Writes that nothing in the work reads back
   * may go to `writes`: they run with the inbox's completion, before the commit.
   */
  run(trx: Tx, item: WorkItem<D>, now: Date, writes: DeferredWrites): Promise<O>;
  /**
   * The work for several claimed messages in one transaction, outcomes in the order given. It must
   * decide exactly as `run` called for each item in that order would. Without it, a batch runs `run`
   * for each item in turn on the batch's transaction.
   */
  runBatch?(trx: Tx, items: readonly WorkItem<D>[], now: Date, writes: DeferredWrites): Promise<O[]>;
}

export interface GroupCommitOptions {
  /** Most commands committed by one transaction; 1 turns group commit off. */
  maxBatch: number;
  /** Transactions a consumer may have in flight at once; commands arriving meanwhile queue. */
  concurrency: number;
  /** Commands a consumer may have queued; past it a command is refused as overloaded (nothing recorded). */
  queueLimit: number;
  /** Seconds to advertise when refusing for overload. */
  overloadRetryAfterSeconds: number;
  cache: DuplicateCache;
  /** Told about each batch committed (its size), for metrics. */
  onBatch?: ((consumer: string, size: number) => void) | undefined;
  /** Told about each command answered from the duplicate cache, for metrics. */
  onCacheHit?: ((consumer: string) => void) | undefined;
}

interface Pending {
  readonly command: InboxCommand;
  readonly data: unknown;
  readonly resolve: (result: InboxResult<unknown>) => void;
  readonly reject: (error: unknown) => void;
}

interface Lane {
  readonly handler: InboxHandler<unknown, unknown>;
  readonly queue: Pending[];
  running: number;
  /** A pump is scheduled for the end of this turn of the event loop. */
  scheduled: boolean;
}

/** Copies of a key in flight are joined at most this often before the database alone decides. */
const MAX_JOINS = 3;
/** A per-message transaction chosen as a deadlock victim runs again, this many times in all. */
const MAX_CONFLICT_ATTEMPTS = 3;

/**
 * Group commit for inbox consumers.
 *
 * Each consumer has a lane with at most `concurrency` transactions in flight. A command that finds a
 * free slot starts a transaction at the end of the event loop's turn, with the commands that arrived in
 * the same turn (no timer: at low load a batch is one message); commands that arrive while every slot
 * is busy queue, and the next free slot takes everything queued (up to
 * `maxBatch`) into one transaction: one multi-row claim in key order, the consumer's work for the
 * claimed messages in arrival order, one multi-row completion, one COMMIT. A batch that fails for any
 * reason is split in halves, each retried as a batch, down to one message per transaction, so a poison
 * message fails alone; a slot never holds more than one transaction.
 *
 * Copies: a completed record never changes, so a copy whose record is in the duplicate cache is answered
 * without the database; a copy of a key that is in flight in this process waits for it and is then
 * answered like any later copy. Everything else is decided by the database's primary key, as in
 * processOnce, so several processes may share the inbox.
 */
export class GroupCommitter {
  readonly #ctx: InboxContext;
  readonly #options: GroupCommitOptions;
  readonly #lanes = new Map<string, Lane>();
  readonly #inFlight = new Map<string, Promise<unknown>>();
  #joined = 0;

  constructor(ctx: InboxContext, options: GroupCommitOptions) {
    this.#ctx = ctx;
    this.#options = options;
  }

  /** Runs a command through its consumer's lane exactly once; resolves when its outcome is committed. */
  async submit<D, O>(handler: InboxHandler<D, O>, command: InboxCommand, data: D): Promise<InboxResult<O>> {
    const id = inFlightKey(command);
    for (let joins = 0; ; joins++) {
      const cached = this.#options.cache.get(command.consumer, command.key.messageId);
      if (cached !== undefined) {
        observe(() => this.#options.onCacheHit?.(command.consumer));
        return (await this.#duplicate(command, cached)) as InboxResult<O>;
      }
      const running = this.#inFlight.get(id);
      if (running === undefined || joins >= MAX_JOINS) break;
      this.#joined++;
      try {
        await this.#waitFor(running, command);
      } finally {
        this.#joined--;
      }
    }

    const lane = this.#lane(handler);
    if (lane.queue.length >= this.#options.queueLimit) {
      throw new OverloadedError(command.consumer, command.key.messageId, this.#options.overloadRetryAfterSeconds);
    }
    const result = new Promise<InboxResult<unknown>>((resolve, reject) => {
      lane.queue.push({ command, data, resolve, reject });
    });
    this.#inFlight.set(id, result);
    const forget = () => {
      if (this.#inFlight.get(id) === result) this.#inFlight.delete(id);
    };
    result.then(forget, forget);
    this.#schedule(lane);
    return result as Promise<InboxResult<O>>;
  }

  /** Commands waiting for a transaction, across consumers (for metrics). */
  get queued(): number {
    let n = 0;
    for (const lane of this.#lanes.values()) n += lane.queue.length;
    return n;
  }

  /** Copies waiting for a copy of their key that is in flight in this process. */
  get joined(): number {
    return this.#joined;
  }

  #lane(handler: InboxHandler<unknown, unknown>): Lane {
    let lane = this.#lanes.get(handler.consumer);
    if (lane === undefined) {
      lane = { handler, queue: [], running: 0, scheduled: false };
      this.#lanes.set(handler.consumer, lane);
    }
    return lane;
  }

  /** Waits for the copy of this key that is in flight here, bounded like a wait on its row lock. */
  async #waitFor(running: Promise<unknown>, command: InboxCommand): Promise<void> {
    const bound = new AbortController();
    const settled = running.then(
      () => true,
      () => true,
    );
    const timedOut = sleep(this.#ctx.lockTimeoutMs, false, { signal: bound.signal }).catch(() => false);
    const done = await Promise.race([settled, timedOut]);
    bound.abort();
    if (!done) throw new InFlightError(command.consumer, command.key.messageId, retryAfterSeconds(this.#ctx.lockTimeoutMs));
  }

  /**
   * Starts the lane's next transactions once the current turn of the event loop is over, so that the
   * commands that arrived together (the deliveries of one read from the broker, the requests of one poll)
   * share a transaction instead of the first of them taking a free slot alone.
   */
  #schedule(lane: Lane): void {
    if (lane.scheduled) return;
    lane.scheduled = true;
    setImmediate(() => {
      lane.scheduled = false;
      this.#pump(lane);
    });
  }

  #pump(lane: Lane): void {
    while (lane.running < this.#options.concurrency && lane.queue.length > 0) {
      const batch = lane.queue.splice(0, this.#options.maxBatch);
      lane.running++;
      void this.#run(lane.handler, batch).finally(() => {
        lane.running--;
        this.#pump(lane);
      });
    }
  }

  async #run(handler: InboxHandler<unknown, unknown>, batch: Pending[]): Promise<void> {
    if (batch.length === 1) {
      await this.#single(handler, batch[0]!);
      return;
    }
    let committed: Committed;
    try {
      committed = await this.#transaction(handler, batch);
    } catch {
      // Each half again as a batch, down to one message per transaction: a poison message (or a conflict)
      // fails alone and the others commit, while the slot still uses one connection at a time (all at
      // once, one bad message would take a connection per message and starve the pool for everyone).
      const half = Math.ceil(batch.length / 2);
      await this.#run(handler, batch.slice(0, half));
      await this.#run(handler, batch.slice(half));
      return;
    }
    observe(() => this.#options.onBatch?.(handler.consumer, batch.length));
    for (const [pending, record] of committed.processed) {
      observe(() => this.#options.cache.remember(record));
      pending.resolve({ kind: 'processed', outcome: record.outcome, record });
    }
    if (committed.taken.length > 0) await this.#settleTaken(handler, committed.taken);
  }

  /** One message in its own transaction (processOnce), run again when chosen as a deadlock victim. */
  async #single(handler: InboxHandler<unknown, unknown>, pending: Pending): Promise<void> {
    const { command, data } = pending;
    for (let attempt = 1; ; attempt++) {
      let result: InboxResult<unknown>;
      try {
        result = await processOnce(this.#ctx, command, (trx, writes) =>
          handler.run(trx, { data, key: command.key }, this.#ctx.now(), writes),
        );
      } catch (error) {
        if (attempt < MAX_CONFLICT_ATTEMPTS && isTransactionConflict(error)) continue;
        pending.reject(error);
        return;
      }
      const { record } = result;
      observe(() => this.#options.cache.remember(record));
      pending.resolve(result);
      return;
    }
  }

  /** The batch's transaction: claim all in key order, work in arrival order, complete all, commit. */
  async #transaction(handler: InboxHandler<unknown, unknown>, batch: Pending[]): Promise<Committed> {
    const ctx = this.#ctx;
    return ctx.db.transaction().execute(async (trx) => {
      const receivedAt = ctx.now();
      // A key twice in one batch is claimed once; the later copies are answered from the committed record.
      const first = new Map<string, Pending>();
      for (const pending of batch) {
        if (!first.has(pending.command.key.messageId)) first.set(pending.command.key.messageId, pending);
      }
      const claimed = await claimKeys(
        trx,
        [...first.values()].map(({ command }) => ({
          messageId: command.key.messageId,
          consumer: command.consumer,
          keySource: command.key.source,
          fingerprint: command.fingerprint,
          receivedAt,
        })),
      );
      const mine = batch.filter((p) => claimed.has(p.command.key.messageId) && first.get(p.command.key.messageId) === p);
      const taken = batch.filter((p) => !mine.includes(p));
      const items = mine.map((p) => ({ data: p.data, key: p.command.key }));
      const now = ctx.now();
      // The work's deferred writes and the completions go together, in one statement where the dialect allows.
      const writes = new DeferredWrites(trx);
      let outcomes: unknown[];
      if (handler.runBatch !== undefined && items.length > 1) {
        outcomes = await handler.runBatch(trx, items, now, writes);
      } else {
        outcomes = [];
        for (const item of items) outcomes.push(await handler.run(trx, item, now, writes));
      }
      if (outcomes.length !== mine.length)
        throw new Error(`${handler.consumer}: a batch of ${mine.length} gave ${outcomes.length} outcomes`);
      const completedAt = ctx.now();
      await completeClaims(
        writes,
        trx,
        handler.consumer,
        mine.map((p, i) => ({ messageId: p.command.key.messageId, outcome: outcomes[i] })),
        completedAt,
      );
      await writes.flush();
      for (const pending of mine) await ctx.beforeCommit?.(pending.command);
      return {
        processed: mine.map((p, i) => [p, completedRecord(p.command, receivedAt, completedAt, outcomes[i], 1)] as const),
        taken,
      };
    });
  }

  /**
   * Commands whose key another transaction had claimed: after the batch committed, each gets what a
   * later copy gets (the recorded outcome, a mismatch, or needs-reconciliation). A key whose record
   * vanished meanwhile (released, pruned) is run again on its own.
   */
  async #settleTaken(handler: InboxHandler<unknown, unknown>, taken: Pending[]): Promise<void> {
    let records: Map<string, InboxRecord>;
    try {
      const ids = [...new Set(taken.map((p) => p.command.key.messageId))];
      records = new Map((await findInboxRecords(this.#ctx.db, handler.consumer, ids)).map((r) => [r.messageId, r]));
    } catch (error) {
      for (const pending of taken) pending.reject(error);
      return;
    }
    // One after the other: a copy may need the database (a vanished record, a dead letter), and the slot
    // holds one connection at a time.
    for (const pending of taken) {
      const record = records.get(pending.command.key.messageId);
      if (record === undefined) {
        await this.#single(handler, pending);
        continue;
      }
      try {
        pending.resolve(await this.#duplicate(pending.command, record));
      } catch (error) {
        pending.reject(error);
      }
    }
  }

  /** The answer to a copy whose record is known: the recorded outcome, unless the payload differs. */
  async #duplicate(command: InboxCommand, record: InboxRecord): Promise<InboxResult<unknown>> {
    if (record.fingerprint !== command.fingerprint) await assertSamePayload(this.#ctx, command, record);
    if (record.completedAt === null) {
      throw new NeedsReconciliationError(command.consumer, command.key.messageId, record.receivedAt);
    }
    observe(() => this.#options.cache.remember(record));
    return { kind: 'duplicate', outcome: record.outcome, record };
  }
}

interface Committed {
  processed: (readonly [Pending, InboxRecord])[];
  taken: Pending[];
}

function inFlightKey(command: InboxCommand): string {
  return `${command.consumer}\u0000${command.key.messageId}`;
}

/**
 * Runs an observer (metrics, the duplicate cache) after a commit. They are advisory: whatever they throw,
 * the committed outcome must still reach its caller, so the error goes no further.
 */
function observe(notify: () => void): void {
  try {
    notify();
  } catch {
    // Ignored on purpose: see above. A broken metric must not turn a committed command into a 500.
  }
}
