/**
 * What a MariaDB or MySQL failure means to the service, read from mysql2's error (its server error
 * number `errno`, or its client `code`). Pure: no driver import, so the engine code that decides on
 * retries and answers can load it whatever database is in use.
 */

/** The failures the service answers differently; any other error is a plain failure. */
export type MysqlFailureKind = 'duplicate' | 'lock-timeout' | 'deadlock' | 'connection-lost' | 'read-only' | 'busy';

/** The code mysql.ts gives its own error when no pooled connection came free in time. */
export const MYSQL_POOL_ACQUIRE_TIMEOUT = 'POOL_ACQUIRE_TIMEOUT';

/** Server error numbers, shared by MariaDB and MySQL. */
const ER_DUP_ENTRY = 1062;
const ER_LOCK_WAIT_TIMEOUT = 1205;
const ER_LOCK_DEADLOCK = 1213;

/**
 * The server refuses writes: --read-only or --super-read-only (1290, ER_OPTION_PREVENTS_STATEMENT),
 * MySQL's read-only mode (1836, ER_READ_ONLY_MODE), a write in a READ ONLY transaction (1792).
 */
const READ_ONLY = new Set([1290, 1836, 1792]);

/**
 * The connection is gone: server gone away (2006), lost during a query (2013), killed (1927,
 * ER_CONNECTION_KILLED), the server shutting down (1053), and the socket errors Node reports.
 */
const CONNECTION_LOST_NUMBERS = new Set([2006, 2013, 1927, 1053]);
const CONNECTION_LOST_CODES = new Set([
  'PROTOCOL_CONNECTION_LOST',
  'PROTOCOL_SEQUENCE_TIMEOUT',
  'ECONNRESET',
  'ECONNREFUSED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENOTFOUND',
]);
/** mysql2's answer to a statement sent on a connection it already knows is closed (no code). */
const CLOSED_CONNECTION_MESSAGE = /^Can't add new command when connection is in closed state$/;

/**
 * mysql2's pool has no acquire timeout of its own: "Queue limit reached." when queueLimit requests
 * already wait, "No connections available." when it may not wait at all. Every connection is busy:
 * the service is overloaded, the database is not down.
 */
const BUSY_MESSAGES = /^Queue limit reached\.$|^No connections available\.$/;

interface DriverError {
  errno?: unknown;
  code?: unknown;
  fatal?: unknown;
  message?: unknown;
  cause?: unknown;
}

/** The kind of a mysql2 failure (or one it caused), or undefined for any other error. */
export function mysqlFailureKind(error: unknown): MysqlFailureKind | undefined {
  // Kysely and the service may wrap the driver's error: look down the cause chain, a few levels.
  let current = error;
  for (let depth = 0; depth < 5 && typeof current === 'object' && current !== null; depth++) {
    const kind = kindOf(current);
    if (kind !== undefined) return kind;
    current = (current as DriverError).cause;
  }
  return undefined;
}

function kindOf(e: DriverError): MysqlFailureKind | undefined {
  const errno = typeof e.errno === 'number' ? e.errno : undefined;
  if (errno === ER_DUP_ENTRY) return 'duplicate';
  if (errno === ER_LOCK_WAIT_TIMEOUT) return 'lock-timeout';
  if (errno === ER_LOCK_DEADLOCK) return 'deadlock';
  if (errno !== undefined && READ_ONLY.has(errno)) return 'read-only';
  if (errno !== undefined && CONNECTION_LOST_NUMBERS.has(errno)) return 'connection-lost';
  if (e.code === MYSQL_POOL_ACQUIRE_TIMEOUT) return 'busy';
  if (typeof e.message === 'string' && BUSY_MESSAGES.test(e.message)) return 'busy';
  if (typeof e.code === 'string' && CONNECTION_LOST_CODES.has(e.code)) return 'connection-lost';
  if (typeof e.message === 'string' && CLOSED_CONNECTION_MESSAGE.test(e.message)) return 'connection-lost';
  // mysql2 marks an error fatal when the connection cannot be used after it.
  if (e.fatal === true) return 'connection-lost';
  return undefined;
}
