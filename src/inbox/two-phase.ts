import { SpanKind } from '@opentelemetry/api';
import { claimTransaction } from './claim.js';
import { completedRecord, type Delivery, type InboxContext, type InboxResult } from './context.js';
import { answer, decide, type RecordPolicy } from './decide.js';
import {
  EffectNotPerformedError,
  EffectOutcomeUnknownError,
  InFlightError,
  SideEffectNotPerformedError,
  SideEffectOutcomeUnknownError,
} from './errors.js';
import type { AttemptKey, InboxRecord } from './inbox.repository.js';
import type { Attempt } from './kind.js';
import type { InboxTx } from './schema.js';
import type { RowsOfOutcome } from './store.js';
import { activeTracer, failSpan, INBOX_ATTEMPT, INBOX_CONSUMER, INBOX_DOWNSTREAM_KEY, INBOX_KEY } from './tracing.js';

/**
 * The two-phase record, for side effects that cannot join a database transaction (an email):
 * phase 1 claims the key as in progress and commits; the effect runs, carrying a downstream
 * idempotency key; phase 2 records the outcome. A copy that finds the record unfinished never
 * repeats the effect blindly.
 */

export interface TwoPhaseOptions {
  /** How long an in-progress record is presumed alive (another instance may be working on it). */
  leaseMs: number;
  /** The effect's receiver deduplicates by the downstream key, so an expired attempt may be repeated. */
  resendIsSafe: boolean;
  /**
   * Told when an attempt's settlement found the record no longer its own (taken over, settled or
   * released by an operator): `record` is what the record is now, undefined when it is gone.
   */
  onStaleAttempt?: ((delivery: Delivery, attempt: Attempt, record: InboxRecord | undefined) => void) | undefined;
  /** Writes the rows an outcome leads to, in the transaction that records it (the kind's `record`). */
  record?: ((trx: InboxTx, outcome: unknown, completedAt: Date) => Promise<void>) | undefined;
}

export type TwoPhaseResult<O> = InboxResult<O> & { readonly takenOver: boolean };

type Effect<O> = (attempt: Attempt) => Promise<O>;

/** A few passes at most: each one either claims, replays, refuses, or lost a take-over race. */
const MAX_PASSES = 3;

/** The downstream idempotency key for a consumer's message. */
export function downstreamKey(consumer: string, messageId: string): string {
  return `${consumer}:${messageId}`;
}

/**
 * Runs an external side effect at most once per (messageId, consumer), recording it in two phases.
 * The effect throws EffectNotPerformedError when it is sure nothing happened (the claim is released:
 * SideEffectNotPerformedError), EffectOutcomeUnknownError when it may have happened
 * (SideEffectOutcomeUnknownError: the record stays in progress and its lease ends, the attempt being
 * over, so the next copy resends safely or is told to reconcile at once). Any other failure leaves the
 * record in progress, to be settled after its lease. Every settlement is tied to the attempt number, so
 * a stale attempt (taken over, or settled by an operator meanwhile) changes nothing: it answers with
 * what the record holds now.
 */
export async function processTwoPhase<O>(
  ctx: InboxContext,
  delivery: Delivery,
  options: TwoPhaseOptions,
  effect: Effect<O>,
): Promise<TwoPhaseResult<O>> {
  const { consumer, key } = delivery;
  const downstream = downstreamKey(consumer, key.messageId);
  const policy: RecordPolicy = { kind: 'two-phase', resendIsSafe: options.resendIsSafe };
  for (let pass = 1; pass <= MAX_PASSES; pass++) {
    const claimedAt = ctx.now();
    // Phase 1: the claim, committed on its own so the record exists while the effect runs.
    const leaseUntil = new Date(claimedAt.getTime() + options.leaseMs);
    const claimed = await claimTransaction(
      ctx,
      [delivery],
      { receivedAt: claimedAt, leaseUntil },
      async (_trx, split) => split.claimed.length === 1,
    );
    if (claimed) {
      const attempt = { downstreamKey: downstream, number: 1 };
      return runEffect({ ctx, delivery, options, effect, receivedAt: claimedAt, attempt, takenOver: false });
    }

    const now = ctx.now();
    const decision = decide(await ctx.store.find({ messageId: key.messageId, consumer }), delivery, policy, now);
    if (decision.action === 'claim') continue; // released meanwhile: claim again
    if (decision.action !== 'take-over') return { ...(await answer<O>(ctx, delivery, decision)), takenOver: false };
    const { record } = decision;
    if (await ctx.store.takeOver(record, new Date(now.getTime() + options.leaseMs))) {
      const attempt = { downstreamKey: downstream, number: record.attempts + 1 };
      return runEffect({ ctx, delivery, options, effect, receivedAt: record.receivedAt, attempt, takenOver: true });
    }
    // Another copy took the expired record over first: look again.
  }
  throw new InFlightError(consumer, key.messageId, 1);
}

/** One attempt of a claimed delivery's effect: the record it runs under and whether it took an expired one over. */
interface EffectRun<O> {
  readonly ctx: InboxContext;
  readonly delivery: Delivery;
  readonly options: TwoPhaseOptions;
  readonly effect: Effect<O>;
  /** When the record was first claimed. */
  readonly receivedAt: Date;
  readonly attempt: Attempt;
  readonly takenOver: boolean;
}

async function runEffect<O>(run: EffectRun<O>): Promise<TwoPhaseResult<O>> {
  const { ctx, delivery, options, effect, receivedAt, attempt, takenOver } = run;
  const key: AttemptKey = { messageId: delivery.key.messageId, consumer: delivery.consumer, attempts: attempt.number };
  let outcome: O;
  try {
    outcome = await attemptEffect(delivery, attempt, effect);
  } catch (error) {
    return settleFailure(ctx, delivery, options, attempt, takenOver, key, error);
  }
  const completedAt = ctx.now();
  const processed = (): TwoPhaseResult<O> => ({
    kind: 'processed',
    outcome,
    record: completedRecord(delivery, receivedAt, completedAt, outcome, attempt.number),
    takenOver,
  });
  // Phase 2. If the process dies before this, the record stays in progress: a later copy is told
  // to wait for the lease, then to reconcile (or resends, when the receiver deduplicates).
  const { record } = options;
  const rows: RowsOfOutcome | undefined = record === undefined ? undefined : (trx) => record(trx, outcome, completedAt);
  if (await ctx.store.completeAttempt(key, outcome, completedAt, rows)) return processed();
  return answerAsNow(ctx, delivery, options, attempt, takenOver, async () => {
    // Released by an operator while this attempt was still sending: the effect happened, so record it.
    const claim = { ...key, keySource: delivery.key.source, fingerprint: delivery.fingerprint, receivedAt };
    if (await ctx.store.recordLateOutcome(claim, attempt.number, outcome, completedAt, rows)) return processed();
    return answerAsNow(ctx, delivery, options, attempt, takenOver, () =>
      Promise.reject(new InFlightError(delivery.consumer, key.messageId, 1)),
    );
  });
}

/** The effect's attempt; while tracing, in a span of its own (a child of the claim's). */
function attemptEffect<O>(delivery: Delivery, attempt: Attempt, effect: Effect<O>): Promise<O> {
  const tracer = activeTracer();
  if (tracer === undefined) return effect(attempt);
  const attributes = {
    [INBOX_CONSUMER]: delivery.consumer,
    [INBOX_KEY]: delivery.key.messageId,
    [INBOX_ATTEMPT]: attempt.number,
    [INBOX_DOWNSTREAM_KEY]: attempt.downstreamKey,
  };
  return tracer.startActiveSpan(`attempt ${delivery.consumer}`, { kind: SpanKind.INTERNAL, attributes }, async (span) => {
    try {
      const outcome = await effect(attempt);
      span.end();
      return outcome;
    } catch (error) {
      failSpan(span, error);
      throw error;
    }
  });
}

/** An effect that threw: release the claim when nothing happened, end the lease when it may have. */
async function settleFailure<O>(
  ctx: InboxContext,
  delivery: Delivery,
  options: TwoPhaseOptions,
  attempt: Attempt,
  takenOver: boolean,
  key: AttemptKey,
  error: unknown,
): Promise<TwoPhaseResult<O>> {
  if (error instanceof EffectNotPerformedError) {
    const notPerformed = new SideEffectNotPerformedError(delivery.consumer, delivery.key.messageId, error);
    if (await ctx.store.release(key)) throw notPerformed;
    return answerAsNow(ctx, delivery, options, attempt, takenOver, () => Promise.reject(notPerformed));
  }
  if (error instanceof EffectOutcomeUnknownError) {
    // The attempt is over: nobody is working on the record any more, so its lease need not be waited out.
    if (!(await ctx.store.endLease(key, ctx.now()))) options.onStaleAttempt?.(delivery, attempt, await ctx.store.find(key));
    throw new SideEffectOutcomeUnknownError(delivery.consumer, delivery.key.messageId, error);
  }
  throw error;
}

/**
 * The answer of an attempt whose settlement found the record no longer its own: what a later copy
 * would get (decide.ts: the recorded outcome, or in flight while a newer attempt holds it), or `ifGone()`.
 */
async function answerAsNow<O>(
  ctx: InboxContext,
  delivery: Delivery,
  options: TwoPhaseOptions,
  attempt: Attempt,
  takenOver: boolean,
  ifGone: () => Promise<TwoPhaseResult<O>>,
): Promise<TwoPhaseResult<O>> {
  const record = await ctx.store.find({ messageId: delivery.key.messageId, consumer: delivery.consumer });
  options.onStaleAttempt?.(delivery, attempt, record);
  const decision = decide(record, delivery, { kind: 'two-phase', resendIsSafe: false }, ctx.now());
  switch (decision.action) {
    case 'claim':
      return ifGone();
    case 'replay':
    case 'dead-letter':
      return { ...(await answer<O>(ctx, delivery, decision)), takenOver };
    default: {
      // Another attempt holds it, or held it and ended: this one is not the one to settle it.
      const waitMs = (decision.record.leaseUntil ?? decision.record.receivedAt).getTime() - ctx.now().getTime();
      return { ...(await answer<O>(ctx, delivery, { action: 'wait', record: decision.record, retryAfterMs: waitMs })), takenOver };
    }
  }
}
