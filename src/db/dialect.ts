import { MssqlAdapter, sql, type Insertable, type Kysely, type UpdateQueryBuilder } from 'kysely';
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
 * Both engines bound every lock wait per connection when the pool opens it (PostgreSQL: the
 * lock_timeout startup parameter; SQL Server: SET LOCK_TIMEOUT sent as a plain batch at connect, see
 * create-database.ts), so there is nothing to send here. A SET LOCK_TIMEOUT sent through Kysely would
 * be a wasted round trip: Kysely runs every statement inside sp_executesql, and SQL Server restores
 * SET options when that dynamic batch returns.
 */
export async function boundLockWait(_trx: Kysely<Database>, _lockTimeoutMs: number): Promise<void> {}

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

/**
 * insertIfAbsent, then `update` only when this call inserted, as one statement where the dialect allows it
 * (PostgreSQL: data-modifying CTEs, one round trip instead of two; SQL Server: two statements). The unique
 * constraint decides the insert exactly as in insertIfAbsent; the update re-checks its conditions on the
 * row's latest committed version either way (READ COMMITTED), so the outcome is the same.
 */
export async function insertIfAbsentThenUpdate<T extends InsertTable, U extends InsertTable>(
  trx: Kysely<Database>,
  table: T,
  row: Insertable<Database[T]>,
  conflictColumns: readonly string[],
  update: UpdateQueryBuilder<Database, U, U, any>,
): Promise<{ inserted: boolean; updated: number }> {
  if (dialectOf(trx) !== 'postgres') {
    const inserted = await insertIfAbsent(trx, table, row, conflictColumns);
    return { inserted, updated: inserted ? Number((await update.executeTakeFirst()).numUpdatedRows) : 0 };
  }
  const insert = trx
    .insertInto(table)
    .values(row as never)
    .onConflict((oc) => oc.columns(conflictColumns as never).doNothing())
    .returning(sql<number>`1`.as('one'));
  const guarded = update.where(sql<boolean>`exists (select 1 from inserted)`).returning(sql<number>`1`.as('one'));
  const { rows } = await sql<{ inserted: number; updated: number }>`
    with inserted as (${insert}), updated as (${guarded})
    select (select count(*) from inserted)::int as inserted, (select count(*) from updated)::int as updated`.execute(trx);
  return { inserted: rows[0]!.inserted === 1, updated: rows[0]!.updated };
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
  /**
   * Message ids, consumers and other keys: compared byte for byte. On SQL Server they are nvarchar
   * (Kysely binds every string parameter as nvarchar; against a varchar column SQL Server converts
   * the column, which under the default SQL_Latin1 collation turns key seeks into scans) with a binary
   * collation (the default collation is case-insensitive: `Order-1` and `order-1` would be one key).
   */
  key: (length: number) => string;
  text: (length: number) => string;
}

/** Binary (case- and accent-sensitive) comparison, as PostgreSQL compares text under its default collation. */
export const MSSQL_KEY_COLLATION = 'Latin1_General_100_BIN2';

export function columnTypes(dialect: DialectName): ColumnTypes {
  return dialect === 'mssql'
    ? {
        uuid: 'uniqueidentifier',
        timestamp: 'datetimeoffset(3)',
        json: 'nvarchar(max)',
        key: (n) => `nvarchar(${n}) collate ${MSSQL_KEY_COLLATION}`,
        // nvarchar counts UTF-16 code units, the schemas count characters: a character outside the
        // Basic Multilingual Plane (an emoji) takes two units, so n characters need up to 2n units.
        text: (n) => `nvarchar(${2 * n})`,
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
/**
 * Node socket codes, and tedious's: ESOCKET/ETIMEOUT/ELOGIN/EINSTLOOKUP when a connection cannot be
 * opened, ECLOSE when it drops under a request, EINVALIDSTATE for a request on a dead connection,
 * ETIMEOUT also for a request past its requestTimeout (tedious cancels it: the server stopped answering).
 */
const NODE_CONNECTION_CODES = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'ESOCKET', 'ECONNCLOSED', 'ELOGIN',
  'ETIMEOUT', 'ECLOSE', 'EINVALIDSTATE', 'EINSTLOOKUP',
]);
/**
 * pg and pg-pool messages; tedious's "Failed to connect to host:port"; Kysely's MSSQL driver's
 * "connection ended"; and tarn's acquire timeout, which keeps only the last connect error's message
 * (no code) or says "operation timed out for an unknown reason".
 */
const CONNECTION_MESSAGES = /Connection terminated|connection timeout|timeout exceeded when trying to connect|Client has encountered a connection error|Connection is closed|not queryable|^Failed to connect to |connection ended without ever completing|operation timed out for an unknown reason/i;

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

/** The tables retention prunes, each with the timestamp that ages its rows. */
export type PrunableTable =
  | { table: 'inbox'; column: 'completed_at' }
  | { table: 'dead_letters'; column: 'received_at' }
  | { table: 'outbox'; column: 'published_at' };

/**
 * Deletes up to `limit` rows whose timestamp is before `cutoff`, oldest first, in one statement (so
 * one short transaction), and returns how many rows this statement removed. Rows another transaction
 * holds (a claim, another instance pruning the same batch) are skipped rather than waited for:
 * PostgreSQL locks the batch with FOR UPDATE SKIP LOCKED, SQL Server reads past locked rows (READPAST).
 * A NULL timestamp never compares below the cutoff, so in-progress inbox rows are never selected.
 */
export async function deleteOldestRows(db: Kysely<Database>, target: PrunableTable, cutoff: Date, limit: number): Promise<number> {
  const table = sql.table(target.table);
  const column = sql.ref(target.column);
  const n = Math.max(1, Math.trunc(limit));
  const result =
    dialectOf(db) === 'mssql'
      ? await sql`WITH batch AS (
          SELECT TOP (${n}) * FROM ${table} WITH (ROWLOCK, UPDLOCK, READPAST)
          WHERE ${column} < ${cutoff} ORDER BY ${column}
        ) DELETE FROM batch`.execute(db)
      : // ctid = ANY(ARRAY(...)) lets the planner fetch the locked rows by tuple id; the FOR UPDATE lock keeps
        // each ctid stable until the DELETE in the same statement removes it.
        await sql`DELETE FROM ${table} WHERE ctid = ANY(ARRAY(
          SELECT ctid FROM ${table} WHERE ${column} < ${cutoff} ORDER BY ${column} LIMIT ${n} FOR UPDATE SKIP LOCKED
        ))`.execute(db);
  return Number(result.numAffectedRows ?? 0n);
}
