import { setTimeout as sleep } from 'node:timers/promises';
import { SpanKind, type Link, type Tracer } from '@opentelemetry/api';
import { ATTR_DB_OPERATION_BATCH_SIZE, ATTR_DB_OPERATION_NAME, ATTR_DB_SYSTEM_NAME } from '@opentelemetry/semantic-conventions';
import { ATTR_DB_SYSTEM, ATTR_MESSAGING_BATCH_MESSAGE_COUNT } from '@opentelemetry/semantic-conventions/incubating';
import { isTransactionConflict, telemetryOf } from '../db/dialect.js';
import { processClaimed, processOnce } from './claim.js';
import { retryAfterSeconds, type Delivery, type InboxContext, type InboxResult } from './context.js';
import { answer, decideTransactional, type Answer } from './decide.js';
import type { DuplicateCache } from './duplicate-cache.js';
import { InFlightError, OverloadedError } from './errors.js';
import type { InboxRecord } from './inbox.repository.js';
import type { TransactionalWork } from './kind.js';
import { Lane, settle } from './lane.js';
import { activeTracer, failSpan, INBOX_CONSUMER } from './tracing.js';

/**
 * Group commit's defaults, for the Fastify plugin and an application's settings alike: 64 deliveries
 * a transaction, 2 transactions in flight per consumer, 512 queued, 10 ms of waiting for a fuller batch.
 */
export const GROUP_COMMIT_DEFAULTS = { maxBatch: 64, concurrency: 2, queueLimit: 512, balanceWaitMs: 10 } as const;

export interface GroupCommitOptions {
  /** Most deliveries committed by one transaction; 1 turns group commit off. */
  maxBatch: number;
  /** Transactions a consumer may have in flight at once; deliveries arriving meanwhile queue. */
  concurrency: number;
  /** Deliveries a consumer may have queued; past it a delivery is refused as overloaded (nothing recorded). */
  queueLimit: number;
  /**
   * How long queued deliveries may wait for a transaction in flight rather than start a smaller one
   * beside it (milliseconds; 0: a free slot starts with whatever is queued). See lane.ts.
   */
  balanceWaitMs?: number;
  /** Seconds to advertise when refusing for overload. */
  overloadRetryAfterSeconds: number;
  cache: DuplicateCache;
  /** Told about each batch committed (its size), for metrics. */
  onBatch?: ((consumer: string, size: number) => void) | undefined;
  /** Told about each delivery answered from the duplicate cache, for metrics. */
  onCacheHit?: ((consumer: string) => void) | undefined;
}

type Result = InboxResult<unknown>;

/** Copies of a key in flight are joined at most this often before the database alone decides. */
const MAX_JOINS = 3;
/** A transaction of one chosen as a deadlock victim runs again, this many times in all. */
const MAX_CONFLICT_ATTEMPTS = 3;

/**
 * Group commit for transactional consumers: each consumer has a lane (lane.ts) whose batches are claim
 * transactions (claim.ts). Before a delivery joins its lane, copies are answered without a transaction
 * where that is sure: a completed record never changes, so a copy whose record is in the duplicate
 * cache is answered from it; a copy of a key in flight in this process waits for it and is then
 * answered like any later copy. Everything else is decided by the database's primary key, so several
 * processes may share the inbox.
 */
export class GroupCommitter {
  readonly #ctx: InboxContext;
  readonly #options: GroupCommitOptions;
  readonly #lanes = new Map<string, Lane<Delivery, Result>>();
  readonly #inFlight = new Map<string, Promise<unknown>>();
  #joined = 0;

  constructor(ctx: InboxContext, options: GroupCommitOptions) {
    this.#ctx = ctx;
    this.#options = options;
  }

  /** Runs a delivery through its consumer's lane exactly once; resolves when its outcome is committed. */
  async submit<O>(work: TransactionalWork, delivery: Delivery): Promise<InboxResult<O>> {
    const id = inFlightKey(delivery);
    for (let joins = 0; ; joins++) {
      const cached = this.#options.cache.get(delivery.consumer, delivery.key.messageId);
      if (cached !== undefined) {
        observe(() => this.#options.onCacheHit?.(delivery.consumer));
        return (await this.#known(delivery, cached)) as InboxResult<O>;
      }
      const running = this.#inFlight.get(id);
      if (running === undefined || joins >= MAX_JOINS) break;
      this.#joined++;
      try {
        await this.#waitFor(running, delivery);
      } finally {
        this.#joined--;
      }
    }
    const result = this.#lane(work).offer(delivery);
    if (result === undefined) {
      throw new OverloadedError(delivery.consumer, delivery.key.messageId, this.#options.overloadRetryAfterSeconds);
    }
    this.#inFlight.set(id, result);
    const forget = () => {
      if (this.#inFlight.get(id) === result) this.#inFlight.delete(id);
    };
    result.then(forget, forget);
    return result as Promise<InboxResult<O>>;
  }

  /** Deliveries waiting for a transaction, across consumers (for metrics). */
  get queued(): number {
    let n = 0;
    for (const lane of this.#lanes.values()) n += lane.queued;
    return n;
  }

  /** Copies waiting for a copy of their key that is in flight in this process. */
  get joined(): number {
    return this.#joined;
  }

  #lane(work: TransactionalWork): Lane<Delivery, Result> {
    let lane = this.#lanes.get(work.consumer);
    if (lane === undefined) {
      const { maxBatch, concurrency, queueLimit, balanceWaitMs } = this.#options;
      lane = new Lane((batch) => this.#runBatch(work, batch), { maxBatch, concurrency, queueLimit, balanceWaitMs });
      this.#lanes.set(work.consumer, lane);
    }
    return lane;
  }

  /** Waits for the copy of this key that is in flight here, bounded like a wait on its row lock. */
  async #waitFor(running: Promise<unknown>, delivery: Delivery): Promise<void> {
    const bound = new AbortController();
    const settled = running.then(
      () => true,
      () => true,
    );
    const timedOut = sleep(this.#ctx.lockTimeoutMs, false, { signal: bound.signal }).catch(() => false);
    const done = await Promise.race([settled, timedOut]);
    bound.abort();
    if (!done) throw new InFlightError(delivery.consumer, delivery.key.messageId, retryAfterSeconds(this.#ctx.lockTimeoutMs));
  }

  /**
   * One lane batch; while tracing, in one span for the transaction, linked to the claim of each command
   * it carries (one transaction, many traces) rather than the child of any one of them.
   */
  #runBatch(work: TransactionalWork, batch: readonly Delivery[]): Promise<PromiseSettledResult<Result>[]> {
    const tracer = activeTracer();
    return tracer === undefined ? this.#runBatchUntraced(work, batch) : this.#runBatchTraced(tracer, work, batch);
  }

  #runBatchTraced(tracer: Tracer, work: TransactionalWork, batch: readonly Delivery[]): Promise<PromiseSettledResult<Result>[]> {
    const links: Link[] = [];
    for (const delivery of batch) if (delivery.span !== undefined) links.push({ context: delivery.span });
    const system = telemetryOf(this.#ctx.store.db);
    const attributes = {
      [ATTR_DB_SYSTEM_NAME]: system.systemName,
      [ATTR_DB_SYSTEM]: system.system,
      [ATTR_DB_OPERATION_NAME]: 'transaction',
      [ATTR_DB_OPERATION_BATCH_SIZE]: batch.length,
      [ATTR_MESSAGING_BATCH_MESSAGE_COUNT]: batch.length,
      [INBOX_CONSUMER]: work.consumer,
    };
    const options = { kind: SpanKind.CLIENT, root: true, links, attributes };
    return tracer.startActiveSpan(`transaction ${work.consumer}`, options, async (span) => {
      try {
        const results = await this.#runBatchUntraced(work, batch);
        span.end();
        return results;
      } catch (error) {
        failSpan(span, error);
        throw error;
      }
    });
  }

  /** One lane batch: a claim transaction for all; a throw makes the lane split the batch. */
  async #runBatchUntraced(work: TransactionalWork, batch: readonly Delivery[]): Promise<PromiseSettledResult<Result>[]> {
    if (batch.length === 1) return [await settle(this.#single(work, batch[0]!))];
    const committed = await processClaimed(this.#ctx, work, batch);
    observe(() => this.#options.onBatch?.(work.consumer, batch.length));
    const results = new Map<Delivery, PromiseSettledResult<Result>>();
    for (const [delivery, record] of committed.processed) {
      observe(() => this.#options.cache.remember(record));
      results.set(delivery, { status: 'fulfilled', value: { kind: 'processed', outcome: record.outcome, record } });
    }
    if (committed.found.length > 0) await this.#settleFound(work, committed.found, results);
    return batch.map((delivery) => results.get(delivery)!);
  }

  /** A delivery in a claim transaction of its own, run again when chosen as a deadlock victim. */
  async #single(work: TransactionalWork, delivery: Delivery): Promise<Result> {
    for (let attempt = 1; ; attempt++) {
      try {
        const result = await processOnce(this.#ctx, work, delivery);
        observe(() => this.#options.cache.remember(result.record));
        return result;
      } catch (error) {
        if (attempt < MAX_CONFLICT_ATTEMPTS && isTransactionConflict(error)) continue;
        throw error;
      }
    }
  }

  /**
   * Deliveries of a batch whose key had a record: after the batch committed, each is decided by the
   * record (decide.ts); a key whose record vanished meanwhile (released, pruned) runs again on its own.
   */
  async #settleFound(
    work: TransactionalWork,
    found: readonly Delivery[],
    results: Map<Delivery, PromiseSettledResult<Result>>,
  ): Promise<void> {
    let records: Map<string, InboxRecord>;
    try {
      const ids = [...new Set(found.map((d) => d.key.messageId))];
      records = new Map((await this.#ctx.store.findMany(work.consumer, ids)).map((r) => [r.messageId, r]));
    } catch (error) {
      for (const delivery of found) results.set(delivery, { status: 'rejected', reason: error });
      return;
    }
    // One after the other: a copy may need the database (a vanished record, a dead letter), and the lane's
    // run holds one connection at a time.
    for (const delivery of found) {
      const record = records.get(delivery.key.messageId);
      const answered = record === undefined ? this.#single(work, delivery) : this.#known(delivery, record);
      results.set(delivery, await settle(answered));
    }
  }

  /** The answer to a copy whose record is known. */
  async #known(delivery: Delivery, record: InboxRecord): Promise<Result> {
    const decision = decideTransactional(record, delivery) as Answer;
    const result = await answer(this.#ctx, delivery, decision);
    observe(() => this.#options.cache.remember(record));
    return result;
  }
}

function inFlightKey(delivery: Delivery): string {
  return `${delivery.consumer}\u0000${delivery.key.messageId}`;
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
