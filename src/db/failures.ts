import { errorsIn } from './engines/common.js';
import type { FailureKind } from './engines/engine.js';
import { ENGINES } from './engines/registry.js';

export type { FailureKind } from './engines/engine.js';

/**
 * Database failures in the service's own words. Each engine module translates its driver's errors once
 * (Engine.failureOf); everything else (the HTTP error handler, the AMQP consumer, the console's replay,
 * the claim) asks here. An error need not say which engine raised it, so every engine is asked.
 */

/** Every failure kind the error stands for: Kysely's SQL Server driver rejects with several errors at once. */
function kindsOf(error: unknown): Set<FailureKind> {
  const kinds = new Set<FailureKind>();
  for (const e of errorsIn(error)) {
    for (const engine of ENGINES) {
      const kind = engine.failureOf(e);
      if (kind !== undefined) kinds.add(kind);
    }
  }
  return kinds;
}

/**
 * The failure the error stands for, if it is a database failure the service tells apart. One error may
 * stand for several (a driver's array of errors): the most telling wins, in the order the HTTP answer
 * follows: an exhausted pool, a lock wait or deadlock, a lost (or read-only) connection, then the rest.
 */
export function databaseFailureOf(error: unknown): { kind: FailureKind } | undefined {
  const kinds = kindsOf(error);
  const first = (...order: FailureKind[]): FailureKind | undefined => order.find((k) => kinds.has(k));
  const kind =
    first('busy', 'lock-timeout', 'deadlock') ??
    (isConnectionFailure(error)
      ? (first('connection-lost', 'read-only') ?? 'connection-lost')
      : first('serialization-conflict', 'duplicate'));
  return kind === undefined ? undefined : { kind };
}

/** True when the error is a unique or primary-key violation. */
export function isUniqueViolation(error: unknown): boolean {
  return kindsOf(error).has('duplicate');
}

/** True when a statement gave up waiting for a lock (the connection's lock timeout, or lockKeys's). */
export function isLockTimeout(error: unknown): boolean {
  return kindsOf(error).has('lock-timeout');
}

/** True when the statement was chosen as a deadlock victim: nothing of it is kept. */
export function isDeadlock(error: unknown): boolean {
  return kindsOf(error).has('deadlock');
}

/**
 * True when the database was busy rather than broken: a lock wait past the bound, or a deadlock victim.
 * Nothing the statement did was kept, so the request can be retried. (The claim's own lock timeout is
 * the in-flight answer instead; see processOnce.)
 */
export function isDatabaseBusy(error: unknown): boolean {
  const kinds = kindsOf(error);
  return kinds.has('lock-timeout') || kinds.has('deadlock');
}

/**
 * True when no pooled connection came free in time because every one is busy: the service is
 * overloaded, the database is not down. pg-pool says so only for a request that queued behind a full
 * pool; tarn (SQL Server) only when no connection attempt failed meanwhile (otherwise it repeats that
 * failure).
 */
export function isPoolExhausted(error: unknown): boolean {
  return kindsOf(error).has('busy');
}

/**
 * True when the transaction was chosen as a deadlock victim or failed serialization: it rolled back
 * whole, and running it again may succeed.
 */
export function isTransactionConflict(error: unknown): boolean {
  const kinds = kindsOf(error);
  return kinds.has('deadlock') || kinds.has('serialization-conflict');
}

/**
 * True when the database connection failed rather than the statement: a lost or refused connection,
 * a server shutting down or turned read-only, a pool that could not connect in time (a pool that is
 * merely full is not: see isPoolExhausted). The transaction did not commit, or (the connection lost
 * after COMMIT was sent) its outcome is unknown: either way the answer is 503 and the client's retry,
 * through the inbox, applies it once or replays it. A driver's error that wraps one (`cause`) counts.
 */
export function isConnectionFailure(error: unknown): boolean {
  if (isPoolExhausted(error)) return false;
  return errorsIn(error).some((e) => {
    const kinds = kindsOf(e);
    if (kinds.has('connection-lost') || kinds.has('read-only')) return true;
    if (typeof e !== 'object' || e === null) return false;
    const cause = (e as { cause?: unknown }).cause;
    return cause !== undefined && cause !== e && isConnectionFailure(cause);
  });
}

/**
 * Outages and busy moments, never the work's own fault: the connection failed, every pooled connection
 * was busy, a lock wait ran out, or the transaction lost a conflict. Retrying later may succeed.
 */
export function isPassingFailure(error: unknown): boolean {
  return isConnectionFailure(error) || isDatabaseBusy(error) || isPoolExhausted(error) || isTransactionConflict(error);
}

/**
 * Runs a statement that is safe to repeat (a read, an absolute write) and runs it once more if it was
 * a deadlock victim: the other transaction has usually finished by then. A second failure, or a lock
 * timeout (which would only wait as long again), goes to the caller.
 */
export async function retryOnceIfDeadlocked<T>(run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (error) {
    if (!isDeadlock(error)) throw error;
    return run();
  }
}
