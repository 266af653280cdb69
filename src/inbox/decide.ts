import { retryAfterSeconds, type Delivery, type InboxContext, type InboxResult } from './context.js';
import { FingerprintMismatchError, InFlightError, NeedsReconciliationError } from './errors.js';
import type { InboxRecord } from './inbox.repository.js';

/**
 * The inbox's one decision: given the record a delivery's key already has (or none), what happens to
 * the delivery. Every path asks it: a copy whose claim found the key taken, a copy answered from the
 * duplicate cache, a batch's copies, a two-phase attempt that looks again.
 */

/**
 * How a consumer's unfinished records are read. A transactional consumer never commits one (the claim,
 * the work and the outcome commit together), so one that exists is a side effect's and needs an
 * operator. A two-phase consumer commits its claim before the effect: an unfinished record is an
 * attempt in flight until its lease runs out, and then either repeated (the receiver deduplicates) or
 * reconciled.
 */
export type RecordPolicy = { readonly kind: 'transaction' } | { readonly kind: 'two-phase'; readonly resendIsSafe: boolean };

export const TRANSACTIONAL: RecordPolicy = { kind: 'transaction' };

export type Decision =
  /** No record: claim the key (again, if it was released or pruned meanwhile). */
  | { readonly action: 'claim' }
  /** Completed with this payload: answer the recorded outcome. */
  | { readonly action: 'replay'; readonly record: InboxRecord }
  /** The key holds another payload: never applied, dead-lettered. */
  | { readonly action: 'dead-letter'; readonly record: InboxRecord }
  /** An attempt holds the record within its lease: retry after it. */
  | { readonly action: 'wait'; readonly record: InboxRecord; readonly retryAfterMs: number }
  /** An attempt ended without an outcome and repeating its effect is not safe: an operator settles it. */
  | { readonly action: 'reconcile'; readonly record: InboxRecord }
  /** An attempt's lease ran out and its effect may be repeated under the same downstream key. */
  | { readonly action: 'take-over'; readonly record: InboxRecord };

/** The decision for a delivery whose key has `record` (undefined: none), at `now`. */
export function decide(
  record: InboxRecord | undefined,
  delivery: Pick<Delivery, 'fingerprint'>,
  policy: RecordPolicy,
  now: Date,
): Decision {
  if (record === undefined) return { action: 'claim' };
  if (record.fingerprint !== delivery.fingerprint) return { action: 'dead-letter', record };
  if (record.completedAt !== null) return { action: 'replay', record };
  if (policy.kind === 'transaction') return { action: 'reconcile', record };
  const retryAfterMs = (record.leaseUntil ?? record.receivedAt).getTime() - now.getTime();
  if (retryAfterMs > 0) return { action: 'wait', record, retryAfterMs };
  return policy.resendIsSafe ? { action: 'take-over', record } : { action: 'reconcile', record };
}

/** A decision that answers the delivery without claiming anything. */
export type Answer = Extract<Decision, { action: 'replay' | 'dead-letter' | 'wait' | 'reconcile' }>;

/**
 * Carries out an answer: the recorded outcome for a replay; otherwise the refusal, thrown. A reused
 * key's payload goes to the dead-letter table first, in a statement of its own (no claim is open).
 */
export async function answer<O>(ctx: InboxContext, delivery: Delivery, decision: Answer): Promise<InboxResult<O>> {
  const { consumer, key } = delivery;
  switch (decision.action) {
    case 'replay':
      return { kind: 'duplicate', outcome: decision.record.outcome as O, record: decision.record };
    case 'wait':
      throw new InFlightError(consumer, key.messageId, retryAfterSeconds(decision.retryAfterMs));
    case 'reconcile':
      throw new NeedsReconciliationError(consumer, key.messageId, decision.record.receivedAt);
    case 'dead-letter': {
      const { record } = decision;
      const deadLetterId = await ctx.store.deadLetter({
        consumer,
        messageId: key.messageId,
        keySource: key.source,
        payload: delivery.payload,
        storedFingerprint: record.fingerprint,
        receivedFingerprint: delivery.fingerprint,
        reason: 'fingerprint-mismatch',
        receivedAt: ctx.now(),
      });
      const error = new FingerprintMismatchError(consumer, key.messageId, record.fingerprint, delivery.fingerprint, deadLetterId);
      ctx.onFingerprintMismatch?.(error);
      throw error;
    }
  }
}

/**
 * The decision for a transactional consumer's delivery, which never waits on a lease nor takes over:
 * claim (again), or an answer.
 */
export function decideTransactional(
  record: InboxRecord | undefined,
  delivery: Pick<Delivery, 'fingerprint'>,
): Answer | { action: 'claim' } {
  // The clock is not read: a transactional record is either completed or a side effect's leftover.
  return decide(record, delivery, TRANSACTIONAL, new Date(0)) as Answer | { action: 'claim' };
}
