import type { Compilable, CompiledQuery, Insertable, QueryExecutorProvider, RawBuilder, Selectable, SelectQueryBuilder } from 'kysely';
import { chunksWithin, keyResources, type AnyDb, type Queryable, type Row, type WriteSink } from './engines/common.js';
import type { Ddl, KeyedBound, KeyedUnion, KeyedUpdate, KeyedValues, ListStatement } from './engines/engine.js';
import { engineOf } from './engines/registry.js';

/**
 * The engine's statements with the caller's schema: each function checks table and column names against
 * the schema of the Kysely instance (or transaction) it is given, and hands the statement to that
 * instance's engine (registry.ts). Nothing outside src/db asks which engine it runs on.
 */

const untyped = <DB>(db: Queryable<DB>): AnyDb => db as AnyDb;
const rowsOf = (rows: readonly object[]): Row[] => rows as Row[];

/** Column types and DDL choices for migrations on this database. */
export function ddlOf(db: QueryExecutorProvider): Ddl {
  return engineOf(db).ddl;
}

/** The engine's name, for telemetry only (db.system.name and db.system). */
export function telemetryOf(db: QueryExecutorProvider): { readonly systemName: string; readonly system: string } {
  return engineOf(db).telemetry;
}

/** True when a list of keys binds as one array parameter: one statement for any number of keys. */
export function bindsArrays(db: QueryExecutorProvider): boolean {
  return engineOf(db).bindsArrays;
}

/**
 * Splits `items` into consecutive chunks, in the order given, so that one statement per chunk binds at
 * most the engine's parameter limit: `fixed` parameters in every statement plus `each` per item (a
 * number, or the item's own count). Everything that fits goes in one chunk.
 */
export function parameterChunks<T>(db: QueryExecutorProvider, items: readonly T[], each: number | ((item: T) => number), fixed = 0): T[][] {
  return chunksWithin(engineOf(db).maxParameters, items, each, fixed);
}

/**
 * Inserts one row unless a row with the same unique key exists; true when this call inserted it.
 * The unique constraint decides: a concurrent insert of the same key waits for the other transaction
 * and then either inserts (the other rolled back) or reports the conflict (the other committed).
 */
export function insertIfAbsent<DB, T extends keyof DB & string>(
  trx: Queryable<DB>,
  table: T,
  row: NoInfer<Insertable<DB[T]>>,
  conflictColumns: readonly NoInfer<keyof DB[T] & string>[],
): Promise<boolean> {
  return engineOf(trx).insertIfAbsent(untyped(trx), table, row, conflictColumns);
}

/**
 * Inserts several rows, each unless a row with the same unique key exists, and returns the `key` column
 * of the rows this call inserted. Rows are inserted in the order given, so two callers that sort their
 * rows the same way take the unique index's locks in the same order and cannot deadlock on each other.
 */
export async function insertManyIfAbsent<DB, T extends keyof DB & string, K extends keyof DB[T] & string>(
  trx: Queryable<DB>,
  table: T,
  rows: readonly NoInfer<Insertable<DB[T]>>[],
  conflictColumns: readonly NoInfer<keyof DB[T] & string>[],
  key: K,
): Promise<Set<string>> {
  if (rows.length === 0) return new Set();
  return engineOf(trx).insertManyIfAbsent(untyped(trx), table, rowsOf(rows), conflictColumns, key);
}

/**
 * Inserts several rows, skipping any whose unique key is present (with `writes`, handed to it where the
 * engine allows); the columns in `json` hold JSON texts.
 */
export function insertManySkippingPresent<DB, T extends keyof DB & string>(
  trx: Queryable<DB>,
  table: T,
  rows: readonly NoInfer<Insertable<DB[T]>>[],
  conflictColumns: readonly NoInfer<keyof DB[T] & string>[],
  writes?: WriteSink,
  json?: ReadonlySet<string>,
): Promise<void> {
  return engineOf(trx).insertManySkippingPresent(untyped(trx), table, rowsOf(rows), conflictColumns, writes, json);
}

/** Inserts several rows (nothing for no rows); with `writes`, handed to it instead of run at once. */
export async function insertRows<DB, T extends keyof DB & string>(
  trx: Queryable<DB>,
  table: T,
  rows: readonly NoInfer<Insertable<DB[T]>>[],
  writes?: WriteSink,
): Promise<void> {
  if (rows.length === 0) return;
  await engineOf(trx).insertRows(untyped(trx), table, rowsOf(rows), writes);
}

/** Inserts one row and returns the value the database generated for `column` (an identity). */
export function insertReturning<DB, T extends keyof DB & string, K extends keyof DB[T] & string>(
  db: Queryable<DB>,
  table: T,
  row: NoInfer<Insertable<DB[T]>>,
  column: K,
): Promise<unknown> {
  return engineOf(db).insertReturning(untyped(db), table, row, column);
}

/** A query cut to its first `n` rows. */
export function firstRows<DB, TB extends keyof DB, O>(
  db: QueryExecutorProvider,
  query: SelectQueryBuilder<DB, TB, O>,
  n: number,
): SelectQueryBuilder<DB, TB, O> {
  return engineOf(db).firstRows(query, n);
}

/**
 * The first `limit` rows whose `pendingColumn` is NULL, in `orderColumn` order, locked until the
 * transaction ends; rows another transaction holds are skipped, not waited for. Several workers claiming
 * at once get disjoint rows.
 */
export async function lockNextPending<DB, T extends keyof DB & string>(
  trx: Queryable<DB>,
  table: T,
  pendingColumn: keyof DB[T] & string,
  orderColumn: keyof DB[T] & string,
  limit: number,
): Promise<Selectable<DB[T]>[]> {
  const n = Math.max(1, Math.trunc(limit));
  return (await engineOf(trx).lockNextPending(untyped(trx), table, pendingColumn, orderColumn, n)) as Selectable<DB[T]>[];
}

/** A JSON text as a value for a JSON column where the column's type cannot be inferred (inside CASE). */
export function jsonValue(trx: QueryExecutorProvider, text: string): RawBuilder<unknown> {
  return engineOf(trx).jsonValue(text);
}

/**
 * Reads rows by key and locks them for update until the transaction ends, in key order (so two
 * transactions locking overlapping sets cannot deadlock on each other). More keys than one statement
 * may bind go in several statements, in the order given: callers pass their keys sorted.
 */
export async function selectForUpdate<DB, T extends keyof DB & string, K extends keyof DB[T] & string>(
  trx: Queryable<DB>,
  table: T,
  keyColumn: K,
  keys: readonly string[],
): Promise<Selectable<DB[T]>[]> {
  if (keys.length === 0) return [];
  return (await engineOf(trx).lockRows(untyped(trx), table, keyColumn, keys)) as Selectable<DB[T]>[];
}

/**
 * lockKeys(namespace, lockKeys), then selectForUpdate(table, keyColumn, keys): one statement where the
 * engine allows (one round trip fewer for every transaction that takes both), the key locks still taken
 * before any row is read or locked.
 */
export async function selectForUpdateAfterKeyLocks<DB, T extends keyof DB & string, K extends keyof DB[T] & string>(
  trx: Queryable<DB>,
  locks: { readonly namespace: string; readonly keys: readonly string[] },
  table: T,
  keyColumn: K,
  keys: readonly string[],
): Promise<Selectable<DB[T]>[]> {
  const resources = keyResources(locks.namespace, locks.keys);
  return (await engineOf(trx).lockRowsAfterKeyLocks(untyped(trx), resources, table, keyColumn, keys)) as Selectable<DB[T]>[];
}

/**
 * Takes an exclusive lock on each key of `namespace` (an order id, say) until the transaction ends, in
 * one global order, so two transactions locking overlapping key sets cannot deadlock on each other:
 * callers take these locks before any row lock. The wait is bounded by the connection's lock timeout
 * and surfaces as a lock timeout (isLockTimeout) past it.
 */
export async function lockKeys(trx: QueryExecutorProvider, namespace: string, keys: readonly string[]): Promise<void> {
  await engineOf(trx).lockKeys(trx, keyResources(namespace, keys));
}

/**
 * The writes that update several rows chosen by key, each with values of its own (see KeyedUpdate),
 * each expected to change every row it names: a caller hands them to DeferredWrites. Texts are cached
 * per `update`: declare it once, as a constant.
 */
export function updateByKey<DB>(
  trx: Queryable<DB>,
  update: KeyedUpdate,
  rows: readonly KeyedValues[],
  bound: KeyedBound,
): { query: Compilable; rows: number }[] {
  return engineOf(trx).updateByKey(untyped(trx), update, rows, bound);
}

/**
 * Several tables' rows by keys in one statement, or undefined where the engine would need more: the
 * caller then reads each part itself. Texts are cached per `union`: declare it once, as a constant.
 */
export function unionByKeys(db: QueryExecutorProvider, union: KeyedUnion, keys: readonly (readonly string[])[]): CompiledQuery | undefined {
  return engineOf(db).unionByKeys(union, keys);
}

/**
 * A statement binding each list as one array parameter, or undefined where the engine does not bind
 * arrays: the caller then builds chunked IN lists (parameterChunks). Texts are cached per `statement`.
 */
export function listStatement(
  db: QueryExecutorProvider,
  statement: ListStatement,
  parameters: readonly unknown[],
): CompiledQuery | undefined {
  return engineOf(db).listStatement(statement, parameters);
}

/** The rows one DELETE of deleteOldestRows takes on this database when `requested` are asked for. */
export function rowsPerDelete(db: QueryExecutorProvider, requested: number): number {
  return Math.min(requested, engineOf(db).maxDeleteBatch);
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
 * holds (a claim, another instance pruning the same batch) are skipped rather than waited for.
 * A NULL timestamp never compares below the cutoff, so in-progress inbox rows are never selected.
 */
export function deleteOldestRows(db: QueryExecutorProvider, target: PrunableTable, cutoff: Date, limit: number): Promise<number> {
  const n = Math.max(1, Math.trunc(rowsPerDelete(db, limit)));
  return engineOf(db).deleteOldestRows(db, target.table, target.column, cutoff, n);
}
