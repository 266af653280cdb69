import type { Kysely } from 'kysely';
import type { Database, Tx } from '../db/database.js';
import { DeferredWrites, isLockTimeout } from '../db/dialect.js';
import { insertDeadLetter } from './dead-letter.repository.js';
import { FingerprintMismatchError, InFlightError, NeedsReconciliationError } from './errors.js';
import { claimKey, completeClaims, findInboxRecord, type InboxRecord } from './inbox.repository.js';
import type { MessageKey } from './message-key.js';

/** A command for one consumer: its key, the data that defines it and that data's fingerprint. */
export interface InboxCommand {
  readonly consumer: string;
  readonly key: MessageKey;
  readonly fingerprint: string;
  /** What the sender sent, kept in the dead-letter table if the key turns out to be reused. */
  readonly payload: unknown;
}

export interface InboxContext {
  readonly db: Kysely<Database>;
  readonly lockTimeoutMs: number;
  readonly now: () => Date;
  /** Test seam: runs inside the transaction after the work, just before commit. */
  readonly beforeCommit?: ((command: InboxCommand) => Promise<void>) | undefined;
  /** Told about every payload mismatch (logging, metrics). */
  readonly onFingerprintMismatch?: ((error: FingerprintMismatchError) => void) | undefined;
}

export type InboxResult<O> =
  | { readonly kind: 'processed'; readonly outcome: O; readonly record: InboxRecord }
  | { readonly kind: 'duplicate'; readonly outcome: O; readonly record: InboxRecord };

/** A claim that lost the race may find the winner's row gone (released, pruned): try again, a few times. */
const MAX_ATTEMPTS = 3;

/**
 * Runs `work` exactly once per (messageId, consumer).
 *
 * One transaction: claim the key first (insert the inbox row), run the work on that same transaction,
 * record the outcome (with the writes the work deferred), commit. Any failure before commit rolls back the claim with the work, so a
 * redelivery starts clean. A copy arriving while another holds the claim waits on the primary key
 * (bounded by lockTimeoutMs, then InFlightError); once the holder commits, the copy gets the stored
 * outcome back. A copy with the same key but another payload gets FingerprintMismatchError and is
 * dead-lettered, never applied.
 */
export async function processOnce<O>(
  ctx: InboxContext,
  command: InboxCommand,
  work: (trx: Tx, writes: DeferredWrites) => Promise<O>,
): Promise<InboxResult<O>> {
  const key = { messageId: command.key.messageId, consumer: command.consumer };
  for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
    const processed = await claimAndRun(ctx, command, work);
    if (processed !== undefined) return processed;

    const record = await findInboxRecord(ctx.db, key);
    if (record === undefined) continue;
    await assertSamePayload(ctx, command, record);
    if (record.completedAt === null) {
      // Only two-phase consumers commit an unfinished record; they handle it themselves.
      throw new NeedsReconciliationError(command.consumer, command.key.messageId, record.receivedAt);
    }
    return { kind: 'duplicate', outcome: record.outcome as O, record };
  }
  throw new InFlightError(command.consumer, command.key.messageId, 1);
}

async function claimAndRun<O>(
  ctx: InboxContext,
  command: InboxCommand,
  work: (trx: Tx, writes: DeferredWrites) => Promise<O>,
): Promise<InboxResult<O> | undefined> {
  const receivedAt = ctx.now();
  return withClaim(ctx, command, { receivedAt }, async (trx) => {
    // The work's writes and the completion go together, in one statement where the dialect allows.
    const writes = new DeferredWrites(trx);
    const outcome = await work(trx, writes);
    const completedAt = ctx.now();
    await completeClaims(writes, trx, command.consumer, [{ messageId: command.key.messageId, outcome }], completedAt);
    await writes.flush();
    await ctx.beforeCommit?.(command);
    return { kind: 'processed' as const, outcome, record: completedRecord(command, receivedAt, completedAt, outcome, 1) };
  });
}

/**
 * Claims the command's key in a transaction of its own and, only when this call claimed it, runs `then`
 * on that transaction before it commits; undefined when the key was taken (by a committed record). A
 * copy whose claim is uncommitted makes the insert wait, bounded by the connection's lock timeout
 * (see dialect.ts); past it, InFlightError, and nothing of this transaction is kept. A lock timeout in
 * `then` (the work's rows) is not about the claim: it goes to the caller as it is (database busy).
 */
export async function withClaim<T>(
  ctx: InboxContext,
  command: InboxCommand,
  claim: { receivedAt: Date; leaseUntil?: Date },
  then: (trx: Tx) => Promise<T>,
): Promise<T | undefined> {
  return ctx.db.transaction().execute(async (trx) => {
    let claimed: boolean;
    try {
      claimed = await claimKey(trx, {
        messageId: command.key.messageId,
        consumer: command.consumer,
        keySource: command.key.source,
        fingerprint: command.fingerprint,
        receivedAt: claim.receivedAt,
        leaseUntil: claim.leaseUntil ?? null,
      });
    } catch (error) {
      // Only the claim's own insert waits on another copy; its transaction rolls back on this throw.
      if (isLockTimeout(error)) {
        throw new InFlightError(command.consumer, command.key.messageId, retryAfterSeconds(ctx.lockTimeoutMs), { cause: error });
      }
      throw error;
    }
    return claimed ? then(trx) : undefined;
  });
}

/** The record a command just completed, as it now stands in the inbox. */
export function completedRecord(
  command: InboxCommand,
  receivedAt: Date,
  completedAt: Date,
  outcome: unknown,
  attempts: number,
): InboxRecord {
  return {
    messageId: command.key.messageId,
    consumer: command.consumer,
    keySource: command.key.source,
    fingerprint: command.fingerprint,
    receivedAt,
    completedAt,
    outcome,
    attempts,
    leaseUntil: null,
  };
}

/** Seconds to advertise in Retry-After when a copy gave up waiting on the claim. */
export function retryAfterSeconds(waitMs: number): number {
  return Math.max(1, Math.ceil(waitMs / 1000));
}

/**
 * Same key, different payload: never applied, never silent. The message goes to the dead-letter
 * table in its own statement (the claim transaction has already ended), and the caller is told.
 */
export async function assertSamePayload(ctx: InboxContext, command: InboxCommand, record: InboxRecord): Promise<void> {
  if (record.fingerprint === command.fingerprint) return;
  const deadLetterId = await insertDeadLetter(ctx.db, {
    consumer: command.consumer,
    messageId: command.key.messageId,
    keySource: command.key.source,
    payload: command.payload,
    storedFingerprint: record.fingerprint,
    receivedFingerprint: command.fingerprint,
    reason: 'fingerprint-mismatch',
    receivedAt: ctx.now(),
  });
  const error = new FingerprintMismatchError(
    command.consumer,
    command.key.messageId,
    record.fingerprint,
    command.fingerprint,
    deadLetterId,
  );
  ctx.onFingerprintMismatch?.(error);
  throw error;
}
