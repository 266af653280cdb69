import { MssqlAdapter, sql, type Insertable, type Kysely } from 'kysely';
import type { Database } from './database.js';

/**
 * Every difference between PostgreSQL (server or PGlite) and SQL Server lives in this file:
 * error classification, claim-time settings, insert-if-absent, JSON columns and DDL types.
 */

export type DialectName = 'postgres' | 'mssql';

/** Which SQL family a Kysely instance (or transaction) speaks. */
export function dialectOf(db: Kysely<any>): DialectName {
  return db.getExecutor().adapter instanceof MssqlAdapter ? 'mssql' : 'postgres';
}

const PG_UNIQUE_VIOLATION = '23505';
const PG_LOCK_NOT_AVAILABLE = '55P03';
const MSSQL_UNIQUE_VIOLATIONS = new Set([2627, 2601]);
const MSSQL_LOCK_TIMEOUT = 1222;

/** Kysely's SQL Server driver rejects with an array of tedious errors; others reject with one error. */
function errorsIn(error: unknown): unknown[] {
  if (Array.isArray(error)) return error.flatMap(errorsIn);
  if (error instanceof AggregateError) return error.errors.flatMap(errorsIn);
  return [error];
}

function hasCode(error: unknown, code: string): boolean {
  return typeof error === 'object' && error !== null && (error as { code?: unknown }).code === code;
}

function hasNumber(error: unknown, numbers: ReadonlySet<number>): boolean {
  if (typeof error !== 'object' || error === null) return false;
  const value = (error as { number?: unknown }).number;
  return typeof value === 'number' && numbers.has(value);
}

/** True when the error is a unique or primary-key violation (SQLSTATE 23505; SQL Server 2627/2601). */
export function isUniqueViolation(error: unknown): boolean {
  return errorsIn(error).some((e) => hasCode(e, PG_UNIQUE_VIOLATION) || hasNumber(e, MSSQL_UNIQUE_VIOLATIONS));
}

/** True when a statement gave up waiting for a lock (SQLSTATE 55P03; SQL Server 1222). */
export function isLockTimeout(error: unknown): boolean {
  return errorsIn(error).some(
    (e) => hasCode(e, PG_LOCK_NOT_AVAILABLE) || hasNumber(e, new Set([MSSQL_LOCK_TIMEOUT])),
  );
}

/**
 * Bounds how long the claim may wait on another transaction's uncommitted row.
 * PostgreSQL gets lock_timeout as a connection parameter when the pool is made (no round trip here);
 * SQL Server's LOCK_TIMEOUT is a session setting, so it is set at the start of each claim.
 */
export async function boundLockWait(trx: Kysely<Database>, lockTimeoutMs: number): Promise<void> {
  if (dialectOf(trx) === 'mssql') {
    await sql`SET LOCK_TIMEOUT ${sql.raw(String(Math.trunc(lockTimeoutMs)))}`.execute(trx);
  }
}

type InsertTable = keyof Database;

/**
 * Inserts one row unless a row with the same unique key exists; true when this call inserted it.
 * The unique constraint decides: a concurrent insert of the same key waits for the other transaction
 * and then either inserts (the other rolled back) or reports the conflict (the other committed).
 * PostgreSQL uses ON CONFLICT DO NOTHING, which keeps the transaction usable and logs no error;
 * on SQL Server a duplicate-key error ends only the statement, so the transaction goes on.
 */
export async function insertIfAbsent<T extends InsertTable>(
  trx: Kysely<Database>,
  table: T,
  row: Insertable<Database[T]>,
  conflictColumns: readonly string[],
): Promise<boolean> {
  const insert = trx.insertInto(table).values(row as never);
  if (dialectOf(trx) === 'postgres') {
    const result = await insert
      .onConflict((oc) => oc.columns(conflictColumns as never).doNothing())
      .executeTakeFirst();
    return Number(result.numInsertedOrUpdatedRows ?? 0n) === 1;
  }
  try {
    await insert.executeTakeFirst();
    return true;
  } catch (error) {
    if (isUniqueViolation(error)) return false;
    throw error;
  }
}

/** Reads a JSON column: PostgreSQL drivers return parsed jsonb, SQL Server returns text. */
export function readJson(value: unknown): unknown {
  return typeof value === 'string' ? JSON.parse(value) : value;
}

/** Column types for migrations, one entry per dialect. */
export interface ColumnTypes {
  uuid: string;
  timestamp: string;
  json: string;
  /** Keys are visible ASCII by contract, so a single-byte type keeps SQL Server's index keys small. */
  key: (length: number) => string;
  text: (length: number) => string;
}

export function columnTypes(dialect: DialectName): ColumnTypes {
  return dialect === 'mssql'
    ? {
        uuid: 'uniqueidentifier',
        timestamp: 'datetimeoffset(3)',
        json: 'nvarchar(max)',
        key: (n) => `varchar(${n})`,
        text: (n) => `nvarchar(${n})`,
      }
    : {
        uuid: 'uuid',
        timestamp: 'timestamptz(3)',
        json: 'jsonb',
        key: (n) => `varchar(${n})`,
        text: (n) => `varchar(${n})`,
      };
}

const PG_CONNECTION_CLASSES = ['08', '57P'];
const NODE_CONNECTION_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'ESOCKET', 'ECONNCLOSED', 'ELOGIN']);
const CONNECTION_MESSAGES = /Connection terminated|connection timeout|timeout exceeded when trying to connect|Client has encountered a connection error|Connection is closed|not queryable/i;

/**
 * True when the database connection failed rather than the statement: a lost or refused connection,
 * a server shutting down, a pool that could not connect in time. The transaction did not commit.
 */
export function isConnectionFailure(error: unknown): boolean {
  return errorsIn(error).some((e) => {
    if (typeof e !== 'object' || e === null) return false;
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && (NODE_CONNECTION_CODES.has(code) || PG_CONNECTION_CLASSES.some((p) => code.startsWith(p)))) return true;
    const message = (e as { message?: unknown }).message;
    if (typeof message === 'string' && CONNECTION_MESSAGES.test(message)) return true;
    const cause = (e as { cause?: unknown }).cause;
    return cause !== undefined && cause !== e && isConnectionFailure(cause);
  });
}
