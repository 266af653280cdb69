import { DeferredWrites, isLockTimeout } from '../db/dialect.js';
import { completedRecord, retryAfterSeconds, type Delivery, type InboxContext, type InboxResult } from './context.js';
import { answer, decideTransactional } from './decide.js';
import { InFlightError } from './errors.js';
import type { Claim, InboxRecord } from './inbox.repository.js';
import type { Static, TObject } from 'typebox';
import type { TransactionalWork } from './kind.js';
import type { InboxTx } from './schema.js';
import { traceHeadersOf } from './tracing.js';

/** A claim transaction's deliveries: those whose key it claimed, and those whose key had a record. */
export interface ClaimSplit {
  readonly claimed: readonly Delivery[];
  readonly found: readonly Delivery[];
}

/**
 * The claim transaction, the only place a key is claimed: in a transaction of its own, insert the inbox
 * rows of the deliveries' keys (one statement, in key order, so two transactions with overlapping keys
 * wait on each other in the same order and cannot deadlock), then run `then` on that transaction with
 * what was claimed, and commit. A key twice among the deliveries is claimed by its first copy; the
 * others are found. A copy whose key another transaction claimed and has not committed waits on the
 * primary key, bounded by the connection's lock timeout; past it, InFlightError and nothing of this
 * transaction is kept. A lock timeout in `then` (the work's rows) is not about the claim: it goes to the
 * caller as it is (database busy).
 */
export function claimTransaction<T>(
  ctx: InboxContext,
  deliveries: readonly Delivery[],
  claim: { readonly receivedAt: Date; readonly leaseUntil?: Date },
  then: (trx: InboxTx, split: ClaimSplit) => Promise<T>,
): Promise<T> {
  return ctx.store.transaction(async (trx) => {
    const first = new Map<string, Delivery>();
    for (const delivery of deliveries) if (!first.has(delivery.key.messageId)) first.set(delivery.key.messageId, delivery);
    let won: Set<string>;
    try {
      won = await ctx.store.claim(
        trx,
        [...first.values()].map((delivery) => claimOf(delivery, claim)),
      );
    } catch (error) {
      // Only the claim's own insert waits on another copy; its transaction rolls back on this throw.
      if (isLockTimeout(error)) {
        const [delivery] = deliveries;
        throw new InFlightError(delivery!.consumer, delivery!.key.messageId, retryAfterSeconds(ctx.lockTimeoutMs), { cause: error });
      }
      throw error;
    }
    const claimed = deliveries.filter((d) => won.has(d.key.messageId) && first.get(d.key.messageId) === d);
    const found = deliveries.filter((d) => !claimed.includes(d));
    return then(trx, { claimed, found });
  });
}

function claimOf(delivery: Delivery, claim: { receivedAt: Date; leaseUntil?: Date }): Claim {
  return {
    messageId: delivery.key.messageId,
    consumer: delivery.consumer,
    keySource: delivery.key.source,
    fingerprint: delivery.fingerprint,
    receivedAt: claim.receivedAt,
    leaseUntil: claim.leaseUntil ?? null,
  };
}

/** What a transactional claim transaction committed: each claimed delivery with its record, and the found ones. */
export interface Committed {
  readonly processed: readonly (readonly [Delivery, InboxRecord])[];
  readonly found: readonly Delivery[];
}

/**
 * Transactional deliveries of one consumer in one claim transaction: claim, the work for the claimed
 * deliveries in arrival order, their completion (with the writes the work deferred, in one statement
 * where the dialect allows), commit. Any failure rolls back the claims with the work, so a redelivery
 * starts clean.
 */
export function processClaimed(ctx: InboxContext, work: TransactionalWork, deliveries: readonly Delivery[]): Promise<Committed> {
  const receivedAt = ctx.now();
  return claimTransaction(ctx, deliveries, { receivedAt }, async (trx, { claimed, found }) => {
    if (claimed.length === 0) return { processed: [], found };
    const outcomes = await runWork(work, trx, claimed, ctx.now());
    const completedAt = ctx.now();
    const writes = outcomes.writes;
    const completions = claimed.map((d, i) => ({ messageId: d.key.messageId, outcome: outcomes.values[i] }));
    await ctx.store.complete(writes, trx, work.consumer, completions, completedAt);
    // The last statement of the transaction: on PostgreSQL its COMMIT goes out in the same round trip.
    await writes.flush({ commit: true });
    const processed = claimed.map((d, i) => [d, completedRecord(d, receivedAt, completedAt, outcomes.values[i], 1)] as const);
    return { processed, found };
  });
}

async function runWork(work: TransactionalWork, trx: InboxTx, claimed: readonly Delivery[], now: Date) {
  const writes = new DeferredWrites(trx);
  // A delivery's payload is its kind's normalized data (runner.ts).
  const items = claimed.map((d) => ({
    data: d.payload as Static<TObject>,
    key: d.key,
    ...(d.span === undefined ? {} : { trace: traceHeadersOf(d.span) }),
  }));
  let values: unknown[];
  if (work.runBatch !== undefined && items.length > 1) {
    values = await work.runBatch(trx, items, now, writes);
  } else {
    values = [];
    for (const item of items) {
      values.push(await work.run(trx, item, now, writes));
      // PostgreSQL runs the deferred writes as one statement, where two updates of one row would not both
      // take effect: items of the same kind may touch the same rows, so each item's writes go before the next.
      if (items.length > 1) await writes.flush();
    }
  }
  if (values.length !== claimed.length) throw new Error(`${work.consumer}: a batch of ${claimed.length} gave ${values.length} outcomes`);
  return { values, writes };
}

/** A claim that lost the race may find the winner's row gone (released, pruned): try again, a few times. */
const MAX_ATTEMPTS = 3;

/**
 * Runs `work` exactly once per (messageId, consumer) for one delivery: a claim transaction of one. When
 * the key was taken, the delivery gets what the record says (decide.ts): the recorded outcome, a
 * dead letter for another payload, or needs-reconciliation for a side effect's unfinished record.
 */
export async function processOnce<O>(ctx: InboxContext, work: TransactionalWork, delivery: Delivery): Promise<InboxResult<O>> {
  for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
    const { processed } = await processClaimed(ctx, work, [delivery]);
    const [done] = processed;
    if (done !== undefined) return { kind: 'processed', outcome: done[1].outcome as O, record: done[1] };
    const decision = decideTransactional(
      await ctx.store.find({ messageId: delivery.key.messageId, consumer: delivery.consumer }),
      delivery,
    );
    if (decision.action !== 'claim') return answer(ctx, delivery, decision);
  }
  throw new InFlightError(delivery.consumer, delivery.key.messageId, 1);
}
