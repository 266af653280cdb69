import {
  EffectNotPerformedError,
  EffectOutcomeUnknownError,
  InFlightError,
  NeedsReconciliationError,
  SideEffectNotPerformedError,
  SideEffectOutcomeUnknownError,
} from './errors.js';
import {
  completeAttempt,
  endAttemptLease,
  findInboxRecord,
  recordLateOutcome,
  releaseClaim,
  takeOverClaim,
  type AttemptKey,
  type InboxRecord,
} from './inbox.repository.js';
import {
  assertSamePayload,
  completedRecord,
  retryAfterSeconds,
  withClaim,
  type InboxCommand,
  type InboxContext,
  type InboxResult,
} from './process-once.js';

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
  onStaleAttempt?: ((command: InboxCommand, attempt: Attempt, record: InboxRecord | undefined) => void) | undefined;
}

/** What the effect is told about the attempt it makes. */
export interface Attempt {
  /** `<consumer>:<messageId>`: the same on every attempt, so the receiver can deduplicate. */
  downstreamKey: string;
  /** 1 for the first attempt; more when an expired attempt is taken over. */
  number: number;
}

export type TwoPhaseResult<O> = InboxResult<O> & { readonly takenOver: boolean };

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
  command: InboxCommand,
  options: TwoPhaseOptions,
  effect: (attempt: Attempt) => Promise<O>,
): Promise<TwoPhaseResult<O>> {
  const key = { messageId: command.key.messageId, consumer: command.consumer };
  const downstream = downstreamKey(command.consumer, command.key.messageId);
  for (let pass = 1; pass <= MAX_PASSES; pass++) {
    const claimedAt = ctx.now();
    // Phase 1: the claim, committed on its own so the record exists while the effect runs.
    const leaseUntil = new Date(claimedAt.getTime() + options.leaseMs);
    if (await withClaim(ctx, command, { receivedAt: claimedAt, leaseUntil }, async () => true)) {
      return runEffect(ctx, command, options, claimedAt, { downstreamKey: downstream, number: 1 }, effect, false);
    }

    const record = await findInboxRecord(ctx.db, key);
    if (record === undefined) continue; // released meanwhile: claim again
    await assertSamePayload(ctx, command, record);
    if (record.completedAt !== null) return { kind: 'duplicate', outcome: record.outcome as O, record, takenOver: false };

    const now = ctx.now();
    const leaseEnd = record.leaseUntil ?? record.receivedAt;
    if (leaseEnd.getTime() > now.getTime()) {
      throw new InFlightError(command.consumer, command.key.messageId, retryAfterSeconds(leaseEnd.getTime() - now.getTime()));
    }
    if (!options.resendIsSafe) throw new NeedsReconciliationError(command.consumer, command.key.messageId, record.receivedAt);
    if (await takeOverClaim(ctx.db, record, new Date(now.getTime() + options.leaseMs))) {
      const attempt = { downstreamKey: downstream, number: record.attempts + 1 };
      return runEffect(ctx, command, options, record.receivedAt, attempt, effect, true);
    }
    // Another copy took the expired record over first: look again.
  }
  throw new InFlightError(command.consumer, command.key.messageId, 1);
}

async function runEffect<O>(
  ctx: InboxContext,
  command: InboxCommand,
  options: TwoPhaseOptions,
  receivedAt: Date,
  attempt: Attempt,
  effect: (attempt: Attempt) => Promise<O>,
  takenOver: boolean,
): Promise<TwoPhaseResult<O>> {
  const key: AttemptKey = { messageId: command.key.messageId, consumer: command.consumer, attempts: attempt.number };
  let outcome: O;
  try {
    outcome = await effect(attempt);
  } catch (error) {
    if (error instanceof EffectNotPerformedError) {
      const notPerformed = new SideEffectNotPerformedError(command.consumer, command.key.messageId, error);
      if (await releaseClaim(ctx.db, key)) throw notPerformed;
      return answerAsNow(ctx, command, options, attempt, takenOver, () => Promise.reject(notPerformed));
    }
    if (error instanceof EffectOutcomeUnknownError) {
      // The attempt is over: nobody is working on the record any more, so its lease need not be waited out.
      if (!(await endAttemptLease(ctx.db, key, ctx.now()))) options.onStaleAttempt?.(command, attempt, await findInboxRecord(ctx.db, key));
      throw new SideEffectOutcomeUnknownError(command.consumer, command.key.messageId, error);
    }
    throw error;
  }
  const completedAt = ctx.now();
  // Phase 2. If the process dies before this, the record stays in progress: a later copy is told
  // to wait for the lease, then to reconcile (or resends, when the receiver deduplicates).
  if ((await completeAttempt(ctx.db, key, outcome, completedAt)) === 1) {
    return { kind: 'processed', outcome, record: completedRecord(command, receivedAt, completedAt, outcome, attempt.number), takenOver };
  }
  return answerAsNow(ctx, command, options, attempt, takenOver, async () => {
    // Released by an operator while this attempt was still sending: the effect happened, so record it.
    const claim = { ...key, keySource: command.key.source, fingerprint: command.fingerprint, receivedAt };
    if (await recordLateOutcome(ctx.db, claim, attempt.number, outcome, completedAt)) {
      return { kind: 'processed', outcome, record: completedRecord(command, receivedAt, completedAt, outcome, attempt.number), takenOver };
    }
    return answerAsNow(ctx, command, options, attempt, takenOver, () =>
      Promise.reject(new InFlightError(command.consumer, key.messageId, 1)),
    );
  });
}

/**
 * The answer of an attempt whose settlement found the record no longer its own: what a later copy
 * would get (the recorded outcome, or in-flight while a newer attempt holds it), or `ifGone()`.
 */
async function answerAsNow<O>(
  ctx: InboxContext,
  command: InboxCommand,
  options: TwoPhaseOptions,
  attempt: Attempt,
  takenOver: boolean,
  ifGone: () => Promise<TwoPhaseResult<O>>,
): Promise<TwoPhaseResult<O>> {
  const record = await findInboxRecord(ctx.db, { messageId: command.key.messageId, consumer: command.consumer });
  options.onStaleAttempt?.(command, attempt, record);
  if (record === undefined) return ifGone();
  if (record.completedAt !== null) return { kind: 'duplicate', outcome: record.outcome as O, record, takenOver };
  const waitMs = (record.leaseUntil ?? record.receivedAt).getTime() - ctx.now().getTime();
  throw new InFlightError(command.consumer, command.key.messageId, retryAfterSeconds(waitMs));
}
