import { compiled, jsonInsert, quoteIdentifier } from './json-rows.js';
import {
  CompiledQuery,
  MssqlAdapter,
  sql,
  type Compilable,
  type Insertable,
  type Kysely,
  type KyselyPlugin,
  type PluginTransformQueryArgs,
  type PluginTransformResultArgs,
  type QueryExecutorProvider,
  type QueryResult,
  type RawBuilder,
  type RootOperationNode,
  type Selectable,
  type SelectQueryBuilder,
  type Transaction,
  type UnknownRow,
} from 'kysely';

/**
 * Every difference between PostgreSQL (server or PGlite) and SQL Server lives in this file:
 * error classification, row limits, insert-if-absent, returned columns, row locks, JSON columns and
 * DDL types. Nothing outside src/db asks which dialect it speaks. The helpers take a Kysely instance (or
 * transaction) of any schema: table and column names are checked against that schema.
 *
 * Lock waits: both engines bound every lock wait per connection when the pool opens it (PostgreSQL:
 * the lock_timeout startup parameter; SQL Server: SET LOCK_TIMEOUT sent as a plain batch at connect,
 * see create-database.ts and mssql.ts), so no statement here sets it. A SET LOCK_TIMEOUT sent through
 * Kysely would be a wasted round trip: Kysely runs every statement inside sp_executesql, and SQL
 * Server restores SET options when that dynamic batch returns.
 */

export type DialectName = 'postgres' | 'mssql';

/** Which SQL family a Kysely instance (or transaction) speaks. */
export function dialectOf(db: QueryExecutorProvider): DialectName {
  return db.getExecutor().adapter instanceof MssqlAdapter ? 'mssql' : 'postgres';
}

/**
 * Most parameters one statement binds, per dialect. SQL Server refuses a request with more than 2,100
 * (sp_executesql's own statement and declaration count among them), so its limit keeps a margin;
 * PostgreSQL's protocol counts a statement's parameters in 16 bits.
 */
export const MAX_PARAMETERS: Readonly<Record<DialectName, number>> = { mssql: 2000, postgres: 65_535 };

/**
 * Splits `items` into consecutive chunks, in the order given, so that one statement per chunk binds at
 * most the dialect's MAX_PARAMETERS: `fixed` parameters in every statement plus `each` per item (a number,
 * or the item's own count). Everything that fits goes in one chunk, so the usual batch stays one statement.
 */
export function parameterChunks<T>(db: QueryExecutorProvider, items: readonly T[], each: number | ((item: T) => number), fixed = 0): T[][] {
  const limit = MAX_PARAMETERS[dialectOf(db)];
  const weigh = typeof each === 'number' ? () => each : each;
  const chunks: T[][] = [];
  let chunk: T[] = [];
  let bound = fixed;
  for (const item of items) {
    const weight = weigh(item);
    if (fixed + weight > limit) throw new Error(`one item binds ${fixed + weight} parameters, more than a statement may (${limit})`);
    if (bound + weight > limit) {
      chunks.push(chunk);
      chunk = [];
      bound = fixed;
    }
    chunk.push(item);
    bound += weight;
  }
  if (chunk.length > 0) chunks.push(chunk);
  return chunks;
}

/** What runs compiled statements: a Kysely instance or transaction, whatever its schema. */
export type StatementRunner = QueryExecutorProvider & Pick<Kysely<unknown>, 'executeQuery'>;

/** A write handed to DeferredWrites, and the rows it must change (checked when it runs), if any. */
interface DeferredWrite {
  readonly query: Compilable;
  readonly expect: { readonly rows: number; readonly what: string } | undefined;
}

/**
 * Writes of one transaction that nothing in it reads back before it commits (the work's inserts and
 * updates, the inbox's completion), sent together. On PostgreSQL they wait until flush() and then go as
 * one statement of data-modifying CTEs (one round trip instead of one per write; PostgreSQL runs every
 * part once, on rows the transaction's earlier statements locked or wrote); on SQL Server each runs
 * when added, as a statement of its own. A write whose row count differs from the one it expects fails
 * the transaction. The parts of one statement all see the rows as they were before it: two pending writes
 * to the same row would not both take effect, so a caller defers at most one write per row between
 * flushes.
 */
export class DeferredWrites {
  readonly #trx: StatementRunner;
  readonly #defer: boolean;
  #pending: DeferredWrite[] = [];

  constructor(trx: StatementRunner) {
    this.#trx = trx;
    this.#defer = dialectOf(trx) === 'postgres';
  }

  /** Adds a write (an INSERT or UPDATE without RETURNING); `expect` checks the rows it changes. */
  async add(query: Compilable, expect?: { rows: number; what: string }): Promise<void> {
    const write = { query, expect };
    if (this.#defer) this.#pending.push(write);
    else checkRows(write, Number((await this.#trx.executeQuery(query.compile())).numAffectedRows ?? 0n));
  }

  /**
   * Runs what is pending: one statement (more only past the parameter limit). On PostgreSQL each write's
   * expected row count is checked by the statement itself (a part that changed another number of rows
   * fails it, SQLSTATE 22P02, and with it the transaction), so nothing has to be read back before the
   * commit. With `commit`, the transaction ends with this statement: PreparingClient sends the COMMIT in
   * the statement's round trip (see COMMIT_WITH_STATEMENT), and the caller must not run anything in the
   * transaction after it.
   */
  async flush(options: { commit?: boolean } = {}): Promise<void> {
    const pending = this.#pending;
    this.#pending = [];
    if (!this.#defer) return;
    const prefix = options.commit === true ? COMMIT_WITH_STATEMENT : '';
    const compiled = pending.map((write) => ({ write, query: write.query.compile() }));
    // Each part binds its own parameters, and two more (the expected count, the failure's words) when checked.
    const chunks = parameterChunks(this.#trx, compiled, (c) => c.query.parameters.length + 2);
    for (const [k, chunk] of chunks.entries()) {
      const parameters: unknown[] = [];
      const checks: string[] = [];
      const parts = chunk.map(({ query, write }, i) => {
        const offset = parameters.length;
        parameters.push(...query.parameters);
        // Kysely numbers each query's parameters from $1, and binds every value (no literals in the text).
        const text = query.sql.replace(/\$(\d+)/g, (_, n: string) => `$${Number(n) + offset}`);
        if (write.expect !== undefined) {
          parameters.push(write.expect.rows, write.expect.what);
          const rows = `$${parameters.length - 1}::int`;
          const what = `$${parameters.length}::text`;
          // No RAISE outside PL/pgSQL: a failed cast carries the message, as "invalid input syntax".
          checks.push(
            `case when (select count(*) from w${i}) = ${rows} then 0 ` +
              `else cast(${what} || ': changed ' || (select count(*) from w${i}) || ' rows, expected ' || ${rows} as int) end`,
          );
        }
        return `w${i} as (${text} returning 1)`;
      });
      const select = checks.length === 0 ? '0' : checks.join(' + ');
      const text = `${k === chunks.length - 1 ? prefix : ''}with ${parts.join(', ')} select ${select} as checked`;
      await this.#trx.executeQuery(CompiledQuery.raw(text, parameters));
    }
  }
}

/**
 * A statement text that starts with this comment ends its transaction: the PostgreSQL client sends a
 * COMMIT behind it in the same round trip (prepared-statements.ts), and answers the COMMIT Kysely sends
 * afterwards without sending anything. Other drivers (PGlite) run it as a plain statement, and commit
 * when Kysely says so.
 */
export const COMMIT_WITH_STATEMENT = '/* and commit */ ';

function checkRows(write: DeferredWrite, rows: number): void {
  if (write.expect !== undefined && rows !== write.expect.rows) {
    throw new Error(`${write.expect.what}: changed ${rows} rows, expected ${write.expect.rows}`);
  }
}

/** The parameters one row of a multi-row insert binds: at most one per column it names. */
const columnsOf = (row: object): number => Object.keys(row).length;

const PG_UNIQUE_VIOLATION = '23505';
const PG_LOCK_NOT_AVAILABLE = '55P03';
const MSSQL_UNIQUE_VIOLATIONS = new Set([2627, 2601]);
const MSSQL_LOCK_TIMEOUT = 1222;
const PG_DEADLOCK = '40P01';
const MSSQL_DEADLOCK = 1205;
/**
 * sp_getapplock reports a lock timeout (-1) and a deadlock victim (-3) as return codes, not errors, and
 * RAISERROR/THROW may not raise SQL Server's own 1222 or 1205: lockKeys raises these user error numbers
 * instead, classified as the errors they stand for.
 */
export const MSSQL_APPLOCK_TIMEOUT = 51222;
export const MSSQL_APPLOCK_DEADLOCK = 51205;
const MSSQL_LOCK_TIMEOUTS = new Set([MSSQL_LOCK_TIMEOUT, MSSQL_APPLOCK_TIMEOUT]);
const MSSQL_DEADLOCKS = new Set([MSSQL_DEADLOCK, MSSQL_APPLOCK_DEADLOCK]);

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

/** True when a statement gave up waiting for a lock (SQLSTATE 55P03; SQL Server 1222, or lockKeys's 51222). */
export function isLockTimeout(error: unknown): boolean {
  return errorsIn(error).some((e) => hasCode(e, PG_LOCK_NOT_AVAILABLE) || hasNumber(e, MSSQL_LOCK_TIMEOUTS));
}

/** True when the statement was chosen as a deadlock victim (40P01; 1205, or lockKeys's 51205): nothing of it is kept. */
export function isDeadlock(error: unknown): boolean {
  return errorsIn(error).some((e) => hasCode(e, PG_DEADLOCK) || hasNumber(e, MSSQL_DEADLOCKS));
}

/**
 * True when the database was busy rather than broken: a lock wait past the bound, or a deadlock victim.
 * Nothing the statement did was kept, so the request can be retried. (The claim's own lock timeout is
 * the in-flight answer instead; see processOnce.)
 */
export function isDatabaseBusy(error: unknown): boolean {
  return isLockTimeout(error) || isDeadlock(error);
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

/**
 * True when no pooled connection came free in time because every one is busy: the service is
 * overloaded, the database is not down. pg-pool says "timeout exceeded when trying to connect" only
 * for a request that queued behind a full pool; tarn (SQL Server) says "operation timed out for an
 * unknown reason" when no connection attempt failed meanwhile (otherwise it repeats that failure).
 */
export function isPoolExhausted(error: unknown): boolean {
  return errorsIn(error).some((e) => {
    if (typeof e !== 'object' || e === null) return false;
    const message = (e as { message?: unknown }).message;
    return typeof message === 'string' && POOL_EXHAUSTED_MESSAGES.test(message);
  });
}

const POOL_EXHAUSTED_MESSAGES = /^timeout exceeded when trying to connect$|^operation timed out for an unknown reason$/;

const PG_SERIALIZATION_FAILURE = '40001';

/**
 * True when the transaction was chosen as a deadlock victim or failed serialization (SQLSTATE 40P01,
 * 40001; SQL Server 1205): it rolled back whole, and running it again may succeed.
 */
export function isTransactionConflict(error: unknown): boolean {
  return isDeadlock(error) || errorsIn(error).some((e) => hasCode(e, PG_SERIALIZATION_FAILURE));
}

/**
 * A Kysely instance or one of its transactions, over the schema DB. Both are named so that a
 * transaction's schema is inferred: TypeScript does not infer Kysely's type argument from a Transaction.
 */
export type Queryable<DB> = Kysely<DB> | Transaction<DB>;

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- Kysely's own type for a schema it does not know
type AnySchema = any;

/**
 * The schema-free view of a Kysely instance the helpers build their statements on: Kysely's builders
 * cannot check a table or column name that is a type parameter, so the public signatures check them
 * against the caller's schema instead.
 */
function untyped<DB>(db: Queryable<DB>): Kysely<AnySchema> {
  return db;
}

/**
 * Inserts one row unless a row with the same unique key exists; true when this call inserted it.
 * The unique constraint decides: a concurrent insert of the same key waits for the other transaction
 * and then either inserts (the other rolled back) or reports the conflict (the other committed).
 * PostgreSQL uses ON CONFLICT DO NOTHING, which keeps the transaction usable and logs no error;
 * on SQL Server a duplicate-key error ends only the statement, so the transaction goes on.
 */
export async function insertIfAbsent<DB, T extends keyof DB & string>(
  trx: Queryable<DB>,
  table: T,
  row: NoInfer<Insertable<DB[T]>>,
  conflictColumns: readonly NoInfer<keyof DB[T] & string>[],
): Promise<boolean> {
  const insert = untyped(trx).insertInto(table).values(row);
  if (dialectOf(trx) === 'postgres') {
    const result = await insert.onConflict((oc) => oc.columns(conflictColumns).doNothing()).executeTakeFirst();
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
 * Inserts several rows, each unless a row with the same unique key exists, and returns the `key` column
 * of the rows this call inserted. Rows are inserted in the order given, so two callers that sort their
 * rows the same way take the unique index's locks in the same order and cannot deadlock on each other.
 * PostgreSQL: one INSERT … ON CONFLICT DO NOTHING RETURNING, the rows as one JSON parameter (json-rows.ts;
 * a multi-row VALUES list where rows leave columns to their defaults). SQL Server: a multi-row INSERT
 * fails whole on one duplicate, so each row is its own statement inside the caller's transaction
 * (a duplicate-key error ends only that statement).
 */
export async function insertManyIfAbsent<DB, T extends keyof DB & string, K extends keyof DB[T] & string>(
  trx: Queryable<DB>,
  table: T,
  rows: readonly NoInfer<Insertable<DB[T]>>[],
  conflictColumns: readonly NoInfer<keyof DB[T] & string>[],
  key: K,
): Promise<Set<string>> {
  const inserted = new Set<string>();
  if (rows.length === 0) return inserted;
  if (dialectOf(trx) === 'postgres') {
    const one = jsonInsert({ table, conflict: conflictColumns, returning: key }, rows);
    if (one !== undefined) {
      for (const row of (await trx.executeQuery<Record<string, unknown>>(one)).rows) inserted.add(String(row[key]));
      return inserted;
    }
    for (const chunk of parameterChunks(trx, rows, columnsOf)) {
      const returned = await untyped(trx)
        .insertInto(table)
        .values(chunk)
        .onConflict((oc) => oc.columns(conflictColumns).doNothing())
        .returning(key)
        .execute();
      for (const row of returned) inserted.add(String((row as Record<string, unknown>)[key]));
    }
    return inserted;
  }
  for (const row of rows) {
    if (await insertIfAbsent(trx, table, row, conflictColumns)) inserted.add(String((row as Record<string, unknown>)[key]));
  }
  return inserted;
}

/**
 * Inserts several rows, skipping any whose unique key is present: one multi-row statement per chunk of
 * parameterChunks. PostgreSQL: ON CONFLICT DO NOTHING (with `writes`, handed to it), the rows as one JSON
 * parameter (json-rows.ts), the columns in `json` holding JSON texts. SQL Server: a
 * duplicate fails its multi-row statement alone, then that statement's rows go one by one, each
 * skipped when present, at once.
 */
export async function insertManySkippingPresent<DB, T extends keyof DB & string>(
  trx: Queryable<DB>,
  table: T,
  rows: readonly NoInfer<Insertable<DB[T]>>[],
  conflictColumns: readonly NoInfer<keyof DB[T] & string>[],
  writes?: DeferredWrites,
  json?: ReadonlySet<string>,
): Promise<void> {
  if (dialectOf(trx) === 'postgres') {
    const one = jsonInsert({ table, conflict: conflictColumns }, rows, json);
    if (one !== undefined) {
      await (writes !== undefined ? writes.add(compiled(one)) : trx.executeQuery(one));
      return;
    }
  }
  for (const chunk of parameterChunks(trx, rows, columnsOf)) {
    if (dialectOf(trx) === 'postgres') {
      const insert = untyped(trx)
        .insertInto(table)
        .values(chunk)
        .onConflict((oc) => oc.columns(conflictColumns).doNothing());
      if (writes !== undefined) await writes.add(insert);
      else await insert.execute();
      continue;
    }
    try {
      await untyped(trx).insertInto(table).values(chunk).execute();
    } catch (error) {
      if (!isUniqueViolation(error)) throw error;
      for (const row of chunk) await insertIfAbsent(trx, table, row, conflictColumns);
    }
  }
}

/**
 * Inserts several rows (nothing for no rows); with `writes`, handed to it instead of run at once.
 * PostgreSQL: one statement, the rows as one JSON parameter (json-rows.ts); otherwise, and where rows
 * leave columns to their defaults, one multi-row statement per chunk of parameterChunks.
 */
export async function insertRows<DB, T extends keyof DB & string>(
  trx: Queryable<DB>,
  table: T,
  rows: readonly NoInfer<Insertable<DB[T]>>[],
  writes?: DeferredWrites,
): Promise<void> {
  if (rows.length === 0) return;
  if (dialectOf(trx) === 'postgres') {
    const one = jsonInsert({ table }, rows);
    if (one !== undefined) {
      await (writes !== undefined ? writes.add(compiled(one), { rows: rows.length, what: `insert into ${table}` }) : trx.executeQuery(one));
      return;
    }
  }
  for (const chunk of parameterChunks(trx, rows, columnsOf)) {
    const insert = untyped(trx).insertInto(table).values(chunk);
    await (writes !== undefined ? writes.add(insert, { rows: chunk.length, what: `insert into ${table}` }) : insert.execute());
  }
}

/** Inserts one row and returns the value the database generated for `column` (an identity). */
export async function insertReturning<DB, T extends keyof DB & string, K extends keyof DB[T] & string>(
  db: Queryable<DB>,
  table: T,
  row: NoInfer<Insertable<DB[T]>>,
  column: K,
): Promise<unknown> {
  const insert = untyped(db).insertInto(table).values(row);
  const returned: Record<string, unknown> =
    dialectOf(db) === 'mssql'
      ? await insert.output(`inserted.${column}`).executeTakeFirstOrThrow()
      : await insert.returning(column).executeTakeFirstOrThrow();
  return returned[column];
}

/** A query cut to its first `n` rows: TOP on SQL Server, LIMIT on PostgreSQL. */
export function firstRows<DB, TB extends keyof DB, O>(
  db: QueryExecutorProvider,
  query: SelectQueryBuilder<DB, TB, O>,
  n: number,
): SelectQueryBuilder<DB, TB, O> {
  return dialectOf(db) === 'mssql' ? query.top(n) : query.limit(n);
}

/**
 * The first `limit` rows whose `pendingColumn` is NULL, in `orderColumn` order, locked until the
 * transaction ends; rows another transaction holds are skipped, not waited for (PostgreSQL: FOR UPDATE
 * SKIP LOCKED; SQL Server: UPDLOCK, READPAST). Several workers claiming at once get disjoint rows.
 */
export async function lockNextPending<DB, T extends keyof DB & string>(
  trx: Queryable<DB>,
  table: T,
  pendingColumn: keyof DB[T] & string,
  orderColumn: keyof DB[T] & string,
  limit: number,
): Promise<Selectable<DB[T]>[]> {
  const n = Math.max(1, Math.trunc(limit));
  if (dialectOf(trx) === 'mssql') {
    const { rows } = await sql<Selectable<DB[T]>>`SELECT TOP (${n}) * FROM ${sql.table(table)} WITH (ROWLOCK, UPDLOCK, READPAST)
      WHERE ${sql.ref(pendingColumn)} IS NULL ORDER BY ${sql.ref(orderColumn)}`.execute(trx);
    return rows;
  }
  return (await untyped(trx)
    .selectFrom(table)
    .selectAll()
    .where(pendingColumn, 'is', null)
    .orderBy(orderColumn)
    .limit(n)
    .forUpdate()
    .skipLocked()
    .execute()) as Selectable<DB[T]>[];
}

/** A JSON text as a value for a JSON column where the column's type cannot be inferred (inside CASE). */
export function jsonValue(trx: QueryExecutorProvider, text: string): RawBuilder<unknown> {
  return dialectOf(trx) === 'postgres' ? sql`cast(${text} as jsonb)` : sql`${text}`;
}

/**
 * Reads rows by key and locks them for update until the transaction ends, in key order (so two
 * transactions locking overlapping sets cannot deadlock on each other). PostgreSQL: ORDER BY … FOR
 * UPDATE; SQL Server: UPDLOCK, ROWLOCK hints on a seek of the primary key. More keys than one statement
 * may bind go in several statements, in the order given: callers pass their keys sorted.
 */
export async function selectForUpdate<DB, T extends keyof DB & string, K extends keyof DB[T] & string>(
  trx: Queryable<DB>,
  table: T,
  keyColumn: K,
  keys: readonly string[],
): Promise<Selectable<DB[T]>[]> {
  const locked: Selectable<DB[T]>[] = [];
  for (const chunk of parameterChunks(trx, keys, 1)) locked.push(...(await lockRows(trx, table, keyColumn, chunk)));
  return locked;
}

async function lockRows<DB, T extends keyof DB & string>(
  trx: Queryable<DB>,
  table: T,
  keyColumn: string,
  keys: readonly string[],
): Promise<Selectable<DB[T]>[]> {
  if (dialectOf(trx) === 'postgres') {
    // One array parameter: the same text for any number of keys (json-rows.ts says why that matters);
    // one key is bound as itself (see lockRowsText).
    const query = CompiledQuery.raw(lockRowsText(table, keyColumn, keys.length === 1), keys.length === 1 ? [keys[0]] : [keys]);
    return (await trx.executeQuery<Selectable<DB[T]>>(query)).rows;
  }
  const { rows } = await sql<Selectable<DB[T]>>`SELECT * FROM ${sql.table(table)} WITH (UPDLOCK, ROWLOCK)
    WHERE ${sql.ref(keyColumn)} IN (${sql.join(keys)}) ORDER BY ${sql.ref(keyColumn)}`.execute(trx);
  return rows;
}

/**
 * lockKeys(namespace, lockKeys), then selectForUpdate(table, keyColumn, keys), as one statement on
 * PostgreSQL: one round trip fewer for every transaction that takes both. The key locks are the
 * statement's InitPlan, which its one-time filter evaluates before the scan starts, so they are taken in
 * their global order before any row is read or locked, as two statements would; and FOR UPDATE returns
 * each row's latest committed version whatever the statement waited on. The two calls elsewhere.
 */
export async function selectForUpdateAfterKeyLocks<DB, T extends keyof DB & string, K extends keyof DB[T] & string>(
  trx: Queryable<DB>,
  locks: { readonly namespace: string; readonly keys: readonly string[] },
  table: T,
  keyColumn: K,
  keys: readonly string[],
): Promise<Selectable<DB[T]>[]> {
  const resources = keyResources(locks.namespace, locks.keys);
  if (dialectOf(trx) !== 'postgres' || resources.length === 0 || keys.length === 0) {
    await lockKeys(trx, locks.namespace, locks.keys);
    return selectForUpdate(trx, table, keyColumn, keys);
  }
  const single = keys.length === 1;
  const query = CompiledQuery.raw(lockRowsText(table, keyColumn, single, true), [resources, single ? keys[0] : keys]);
  return (await trx.executeQuery<Selectable<DB[T]>>(query)).rows;
}

const lockRowsTexts = new Map<string, string>();

/** The advisory locks of lockKeys on PostgreSQL, for the resources bound as $1 (a text array). */
const ADVISORY_LOCKS = `select pg_advisory_xact_lock(s.k) from (
        select distinct hashtextextended(r, 0) as k from unnest(cast($1 as text[])) as r order by k
      ) as s`;

/**
 * The lock statement for a table's key. A statement that matches its keys as an array (`= any($n)`)
 * is planned again on every execution when it carries one key: PostgreSQL prices its generic plan for
 * an array of unknown length (ten elements) above a custom plan for one, so it never settles on the
 * generic plan (measured at one connection: every execution planned). A single key is therefore bound
 * as itself, in a text of its own, which keeps its generic plan; the other statements that match keys
 * as arrays do the same.
 */
function lockRowsText(table: string, keyColumn: string, single: boolean, afterKeyLocks = false): string {
  const key = `${table}\u0000${keyColumn}\u0000${single}\u0000${afterKeyLocks}`;
  let text = lockRowsTexts.get(key);
  if (text === undefined) {
    const [t, k] = [table, keyColumn].map(quoteIdentifier);
    const param = afterKeyLocks ? '$2' : '$1';
    const match = `${k} ${single ? `= ${param}` : `= any(${param})`}`;
    const locks = afterKeyLocks ? `(select count(*) from (${ADVISORY_LOCKS}) as l) >= 0 and ` : '';
    text = `select * from ${t} where ${locks}${match} order by ${k} for update`;
    lockRowsTexts.set(key, text);
  }
  return text;
}

/**
 * Takes an exclusive lock on each key of `namespace` (an order id, say) until the transaction ends, in
 * one global order, so two transactions locking overlapping key sets cannot deadlock on each other:
 * callers take these locks before any row lock. The wait is bounded by the connection's lock timeout
 * and surfaces as a lock timeout (isLockTimeout) past it. PostgreSQL: transaction-scoped advisory locks
 * on the keys' 64-bit hashes, in hash order, one statement binding one array (a collision only
 * serialises two keys). SQL Server: sp_getapplock owned by the transaction, one call per key in key
 * order, as one batch per parameterChunks chunk; a refused lock (a return code below 0) raises.
 */
export async function lockKeys(trx: QueryExecutorProvider, namespace: string, keys: readonly string[]): Promise<void> {
  const resources = keyResources(namespace, keys);
  if (resources.length === 0) return;
  if (dialectOf(trx) === 'postgres') {
    // The outer select calls pg_advisory_xact_lock row by row as the sorted subquery yields them.
    await trx.getExecutor().executeQuery(CompiledQuery.raw(ADVISORY_LOCKS, [resources]));
    return;
  }
  for (const chunk of parameterChunks(trx, resources, 1)) await mssqlAppLocks(chunk).execute(trx);
}

/** The lock resources of a namespace's keys: each once, in one global order. */
function keyResources(namespace: string, keys: readonly string[]): string[] {
  return [...new Set(keys.map((key) => `${namespace}:${key}`))].sort();
}

/**
 * One T-SQL batch taking each resource's application lock in the order given; each call is made only
 * while the previous ones were granted (0 or 1), and the first refusal raises. @LockTimeout is left at
 * its default, the session's LOCK_TIMEOUT (the service's lock bound). Resource names longer than
 * sp_getapplock's 255 characters are cut there, which at worst makes two keys one lock.
 */
function mssqlAppLocks(resources: readonly string[]): RawBuilder<unknown> {
  const calls = resources.map(
    (resource) =>
      sql`IF @result >= 0 EXEC @result = sp_getapplock @Resource = ${resource}, @LockMode = 'Exclusive', @LockOwner = 'Transaction';`,
  );
  return sql`DECLARE @result int = 0;
${sql.join(calls, sql`\n`)}
IF @result = -1 THROW ${sql.lit(MSSQL_APPLOCK_TIMEOUT)}, N'key lock not granted within the lock timeout (sp_getapplock: -1)', 1;
IF @result = -3 THROW ${sql.lit(MSSQL_APPLOCK_DEADLOCK)}, N'key lock request chosen as deadlock victim (sp_getapplock: -3)', 1;
IF @result < 0 THROW 51000, N'key lock not granted (sp_getapplock returned an error code)', 1;`;
}

/**
 * Parses the JSON columns of every result row, for a database that returns them as text: SQL Server
 * stores JSON in nvarchar(max), while PostgreSQL's drivers return jsonb parsed. Installed on the SQL Server
 * Kysely instance only (mssql.ts), so repositories read a JSON column's value the same way on both.
 * A column of one of the given names holding a string is JSON text and is always parsed: a JSON string
 * value is stored as its quoted text. NULL (and any value that is not a string) is left as it is.
 * Columns are matched by name in every row, whatever the query: `columns` are names only JSON columns bear.
 */
export class ParseJsonColumnsPlugin implements KyselyPlugin {
  readonly #columns: readonly string[];

  constructor(columns: Iterable<string>) {
    this.#columns = [...new Set(columns)];
  }

  transformQuery(args: PluginTransformQueryArgs): RootOperationNode {
    return args.node;
  }

  async transformResult(args: PluginTransformResultArgs): Promise<QueryResult<UnknownRow>> {
    const { result } = args;
    if (result.rows.length === 0) return result;
    return { ...result, rows: result.rows.map((row) => this.#parse(row)) };
  }

  #parse(row: UnknownRow): UnknownRow {
    let parsed: UnknownRow | undefined;
    for (const column of this.#columns) {
      const value = row[column];
      if (typeof value !== 'string') continue;
      parsed ??= { ...row };
      parsed[column] = parseJsonColumn(column, value);
    }
    return parsed ?? row;
  }
}

function parseJsonColumn(column: string, text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new Error(`column ${column} holds text that is not JSON`, { cause: error });
  }
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

/**
 * Connection exceptions, operator intervention (shutdown, crash), and 25006 read_only_sql_transaction:
 * the server is, or has become, a standby (a failover demoted it, or the address now leads to a
 * replica) and this transaction wrote nothing. The connection is useless for writes: see PreparingClient.
 */
const PG_CONNECTION_CLASSES = ['08', '57P', '25006'];
/**
 * Node socket codes, and tedious's: ESOCKET/ETIMEOUT/ELOGIN/EINSTLOOKUP when a connection cannot be
 * opened, ECLOSE when it drops under a request, EINVALIDSTATE for a request on a dead connection,
 * ETIMEOUT also for a request past its requestTimeout (tedious cancels it: the server stopped answering).
 */
const NODE_CONNECTION_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'ESOCKET',
  'ECONNCLOSED',
  'ELOGIN',
  'ETIMEOUT',
  'ECLOSE',
  'EINVALIDSTATE',
  'EINSTLOOKUP',
]);
/**
 * pg messages; tedious's "Failed to connect to host:port"; Kysely's MSSQL driver's "connection ended";
 * and tarn's acquire timeout, which keeps only the last connect error's message (no code). A pool that
 * is merely full is not a connection failure: see isPoolExhausted.
 */
const CONNECTION_MESSAGES = new RegExp(
  [
    'Connection terminated',
    'connection timeout',
    'Client has encountered a connection error',
    'Connection is closed',
    'not queryable',
    '^Failed to connect to ',
    'connection ended without ever completing',
  ].join('|'),
  'i',
);

/**
 * True when the database connection failed rather than the statement: a lost or refused connection,
 * a server shutting down or turned read-only, a pool that could not connect in time. The transaction
 * did not commit, or (the connection lost after COMMIT was sent) its outcome is unknown: either way
 * the answer is 503 and the client's retry, through the inbox, applies it once or replays it.
 */
export function isConnectionFailure(error: unknown): boolean {
  if (isPoolExhausted(error)) return false;
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

/**
 * The largest batch one DELETE takes on SQL Server. Past about 5,000 locks on one table or index in one
 * statement, SQL Server escalates the row locks to a table lock, which READPAST does not skip: every
 * claim would wait behind the pruner. Each deleted row is a key lock in every index of the table, plus
 * page intent locks, so the batch stays well below that.
 */
export const MSSQL_MAX_DELETE_BATCH = 2000;

/** The rows one DELETE of deleteOldestRows takes on this database when `requested` are asked for. */
export function rowsPerDelete(db: QueryExecutorProvider, requested: number): number {
  return dialectOf(db) === 'mssql' ? Math.min(requested, MSSQL_MAX_DELETE_BATCH) : requested;
}

/**
 * A table retention prunes, with the timestamp column that ages its rows: for a schema DB, one of its
 * tables and a column of that table. Without DB, any table and column name.
 */
export type PrunableTable<DB = Record<string, Record<string, unknown>>> = {
  [T in keyof DB & string]: { table: T; column: keyof DB[T] & string };
}[keyof DB & string];

/**
 * Deletes up to `limit` rows whose timestamp is before `cutoff`, oldest first, in one statement (so
 * one short transaction), and returns how many rows this statement removed. Rows another transaction
 * holds (a claim, another instance pruning the same batch) are skipped rather than waited for:
 * PostgreSQL locks the batch with FOR UPDATE SKIP LOCKED, SQL Server reads past locked rows (READPAST).
 * A NULL timestamp never compares below the cutoff, so in-progress inbox rows are never selected.
 */
export async function deleteOldestRows(db: QueryExecutorProvider, target: PrunableTable, cutoff: Date, limit: number): Promise<number> {
  const table = sql.table(target.table);
  const column = sql.ref(target.column);
  const n = Math.max(1, Math.trunc(rowsPerDelete(db, limit)));
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
