import {
  EffectNotPerformedError,
  EffectOutcomeUnknownError,
  InFlightError,
  NeedsReconciliationError,
  SideEffectNotPerformedError,
  SideEffectOutcomeUnknownError,
} from './errors.js';
import { completeClaim, findInboxRecord, releaseClaim, takeOverClaim } from './inbox.repository.js';
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
 * (SideEffectOutcomeUnknownError); any failure but the first leaves the record in progress, to be
 * settled after its lease by a safe resend or an operator.
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
      return runEffect(ctx, command, claimedAt, { downstreamKey: downstream, number: 1 }, effect, false);
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
      return runEffect(ctx, command, record.receivedAt, { downstreamKey: downstream, number: record.attempts + 1 }, effect, true);
    }
    // Another copy took the expired record over first: look again.
  }
  throw new InFlightError(command.consumer, command.key.messageId, 1);
}

async function runEffect<O>(
  ctx: InboxContext,
  command: InboxCommand,
  receivedAt: Date,
  attempt: Attempt,
  effect: (attempt: Attempt) => Promise<O>,
  takenOver: boolean,
): Promise<TwoPhaseResult<O>> {
  const key = { messageId: command.key.messageId, consumer: command.consumer };
  let outcome: O;
  try {
    outcome = await effect(attempt);
  } catch (error) {
    if (error instanceof EffectNotPerformedError) {
      await releaseClaim(ctx.db, key);
      throw new SideEffectNotPerformedError(command.consumer, command.key.messageId, error);
    }
    if (error instanceof EffectOutcomeUnknownError) throw new SideEffectOutcomeUnknownError(command.consumer, command.key.messageId, error);
    throw error;
  }
  const completedAt = ctx.now();
  // Phase 2. If the process dies before this, the record stays in progress: a later copy is told
  // to wait for the lease, then to reconcile (or resends, when the receiver deduplicates).
  await completeClaim(ctx.db, key, outcome, completedAt);
  return { kind: 'processed', outcome, record: completedRecord(command, receivedAt, completedAt, outcome, attempt.number), takenOver };
}
