import { sql, type Compilable, type RawBuilder } from 'kysely';
import type { AnyDb, DeferredWrite, KeyedBound, KeyedUpdate, KeyedValues, RowColumn } from './engine.js';

/** Helpers every engine module shares: error shapes, parameter chunks, the schema-free view of Kysely. */

export type { AnyDb, AnySchema, DeferredWrite, Queryable, Row, StatementRunner, WriteSink } from './engine.js';

/** Fails when a write changed another number of rows than it expects. */
export function checkRows(write: DeferredWrite, rows: number): void {
  if (write.expect !== undefined && rows !== write.expect.rows) {
    throw new Error(`${write.expect.what}: changed ${rows} rows, expected ${write.expect.rows}`);
  }
}

/**
 * Splits `items` into consecutive chunks, in the order given, so that one statement per chunk binds at
 * most `limit` parameters: `fixed` parameters in every statement plus `each` per item (a number, or the
 * item's own count). Everything that fits goes in one chunk, so the usual batch stays one statement.
 */
export function chunksWithin<T>(limit: number, items: readonly T[], each: number | ((item: T) => number), fixed = 0): T[][] {
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

/** The parameters one row of a multi-row insert binds: at most one per column it names. */
export const columnsOf = (row: object): number => Object.keys(row).length;

/** The lock resources of a namespace's keys: each once, in one global order. */
export function keyResources(namespace: string, keys: readonly string[]): string[] {
  return [...new Set(keys.map((key) => `${namespace}:${key}`))].sort();
}

/** Kysely's SQL Server driver rejects with an array of tedious errors; others reject with one error. */
export function errorsIn(error: unknown): unknown[] {
  if (Array.isArray(error)) return error.flatMap(errorsIn);
  if (error instanceof AggregateError) return error.errors.flatMap(errorsIn);
  return [error];
}

/** The error's `code` when it is a string (SQLSTATE, Node and driver codes). */
export function codeOf(error: unknown): string | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  const code = (error as { code?: unknown }).code;
  return typeof code === 'string' ? code : undefined;
}

/** The error's `number` (SQL Server's message number), if any. */
export function numberOf(error: unknown): number | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  const value = (error as { number?: unknown }).number;
  return typeof value === 'number' ? value : undefined;
}

/** The error's message, if it has one. */
export function messageOf(error: unknown): string | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  const message = (error as { message?: unknown }).message;
  return typeof message === 'string' ? message : undefined;
}

/** Node socket codes, whichever driver opened the socket. */
export const NODE_CONNECTION_CODES: ReadonlySet<string> = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT']);

/**
 * A KeyedUpdate as one UPDATE per parameter chunk, each row's values chosen by key in one CASE per
 * column: each row binds its key once for the IN list and, per column, its key and value again; each
 * statement its bound, NULL and where values.
 */
export function updateByKeyWithCase(
  trx: AnyDb,
  limit: number,
  update: KeyedUpdate,
  rows: readonly KeyedValues[],
  bound: KeyedBound,
  json: (text: string) => RawBuilder<unknown>,
  integer = 'integer',
): { query: Compilable; rows: number }[] {
  const perRow = update.set.filter((c) => c.from === 'row').length;
  const fixed = update.set.length - perRow + update.where.length;
  return chunksWithin(limit, rows, 1 + 2 * perRow, fixed).map((chunk) => {
    const set: Record<string, unknown> = {};
    let [r, b] = [0, 0];
    for (const column of update.set) {
      if (column.from === 'null') set[column.column] = null;
      else if (column.from === 'bound') set[column.column] = bound.set[b++];
      else set[column.column] = caseOf(update.key.column, column, chunk, r++, json, integer);
    }
    let query = trx.updateTable(update.table).set(set);
    update.where.forEach((column, i) => (query = query.where(column, '=', bound.where[i])));
    query = query.where(
      update.key.column,
      'in',
      chunk.map((row) => row.key),
    );
    return { query, rows: chunk.length };
  });
}

/** One `row` column's value chosen by key; an `add` column's own value plus it. */
function caseOf(
  key: string,
  column: RowColumn,
  rows: readonly KeyedValues[],
  index: number,
  json: (text: string) => RawBuilder<unknown>,
  integer: string,
): RawBuilder<unknown> {
  const value = (v: unknown) =>
    column.type === 'integer' ? sql`cast(${v} as ${sql.raw(integer)})` : column.type === 'json' ? json(String(v)) : sql`${v}`;
  const choice = sql`case ${sql.ref(key)} ${sql.join(
    rows.map((row) => sql`when ${row.key} then ${value(row.values[index])}`),
    sql` `,
  )} end`;
  // The column's own name, unquoted as in hand-written SQL: it comes from a constant KeyedUpdate.
  return column.add === true ? sql`${sql.raw(column.column)} + ${choice}` : choice;
}
