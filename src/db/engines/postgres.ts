import { CompiledQuery, PGliteAdapter, PostgresAdapter, sql, type Compilable, type QueryExecutorProvider, type RawBuilder } from 'kysely';
import { compiled, jsonInsert, jsonRows, quoteIdentifier } from '../json-rows.js';
import {
  updateByKeyWithCase,
  chunksWithin,
  codeOf,
  columnsOf,
  messageOf,
  NODE_CONNECTION_CODES,
  type AnyDb,
  type DeferredWrite,
  type Row,
  type StatementRunner,
  type WriteSink,
} from './common.js';
import type { Engine, FailureKind, KeyedBound, KeyedUnion, KeyedUpdate, KeyedValues, ListStatement, RowColumn } from './engine.js';

/**
 * PostgreSQL, on a server (pg) or embedded (PGlite, whose adapter extends PostgresAdapter): ON CONFLICT,
 * RETURNING, FOR UPDATE SKIP LOCKED, advisory locks, arrays bound as one parameter, and writes deferred
 * into one statement of data-modifying CTEs.
 *
 * Lock waits are bounded per connection when the pool opens it (the lock_timeout startup parameter,
 * see create-database.ts), so no statement here sets it.
 */

/**
 * A statement text that starts with this comment ends its transaction: the PostgreSQL client sends a
 * COMMIT behind it in the same round trip (prepared-statements.ts), and answers the COMMIT Kysely sends
 * afterwards without sending anything. Other drivers (PGlite) run it as a plain statement, and commit
 * when Kysely says so.
 */
export const COMMIT_WITH_STATEMENT = '/* and commit */ ';

/** PostgreSQL's protocol counts a statement's parameters in 16 bits. */
const MAX_PARAMETERS = 65_535;

const FAILURE_CODES: ReadonlyMap<string, FailureKind> = new Map([
  ['23505', 'duplicate'],
  ['55P03', 'lock-timeout'],
  ['40P01', 'deadlock'],
  ['40001', 'serialization-conflict'],
  // The server is, or has become, a standby (a failover demoted it, or the address now leads to a
  // replica) and this transaction wrote nothing: the connection is useless for writes (PreparingClient).
  ['25006', 'read-only'],
]);

/** Connection exceptions (class 08) and operator intervention (57P: shutdown, crash). */
const CONNECTION_CLASSES = ['08', '57P'];

/** pg's messages for a connection lost, refused or never opened. */
const CONNECTION_MESSAGES =
  /Connection terminated|connection timeout|Client has encountered a connection error|Connection is closed|not queryable/i;

/** pg-pool says this only for a request that queued behind a full pool. */
const POOL_EXHAUSTED = /^timeout exceeded when trying to connect$/;

function failureOf(error: unknown): FailureKind | undefined {
  const code = codeOf(error);
  if (code !== undefined) {
    const kind = FAILURE_CODES.get(code);
    if (kind !== undefined) return kind;
    if (NODE_CONNECTION_CODES.has(code) || CONNECTION_CLASSES.some((p) => code.startsWith(p))) return 'connection-lost';
  }
  const message = messageOf(error);
  if (message === undefined) return undefined;
  if (POOL_EXHAUSTED.test(message)) return 'busy';
  return CONNECTION_MESSAGES.test(message) ? 'connection-lost' : undefined;
}

/**
 * Deferred writes as one statement of data-modifying CTEs (more only past the parameter limit): one round
 * trip instead of one per write; PostgreSQL runs every part once, on rows the transaction's earlier
 * statements locked or wrote. Each write's expected row count is checked by the statement itself (a part
 * that changed another number of rows fails it, SQLSTATE 22P02, and with it the transaction). With
 * `commit`, the last statement carries COMMIT_WITH_STATEMENT.
 */
async function runTogether(trx: StatementRunner, pending: readonly DeferredWrite[], options: { commit: boolean }): Promise<void> {
  const prefix = options.commit ? COMMIT_WITH_STATEMENT : '';
  const compiledWrites = pending.map((write) => ({ write, query: write.query.compile() }));
  // Each part binds its own parameters, and two more (the expected count, the failure's words) when checked.
  const chunks = chunksWithin(MAX_PARAMETERS, compiledWrites, (c) => c.query.parameters.length + 2);
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
    await trx.executeQuery(CompiledQuery.raw(text, parameters));
  }
}

/** ON CONFLICT DO NOTHING keeps the transaction usable and logs no error. */
async function insertIfAbsent(trx: AnyDb, table: string, row: Row, conflict: readonly string[]): Promise<boolean> {
  const result = await trx
    .insertInto(table)
    .values(row)
    .onConflict((oc) => oc.columns(conflict).doNothing())
    .executeTakeFirst();
  return Number(result.numInsertedOrUpdatedRows ?? 0n) === 1;
}

/** One INSERT … ON CONFLICT DO NOTHING RETURNING, the rows as one JSON parameter (json-rows.ts). */
async function insertManyIfAbsent(
  trx: AnyDb,
  table: string,
  rows: readonly Row[],
  conflict: readonly string[],
  key: string,
): Promise<Set<string>> {
  const inserted = new Set<string>();
  const one = jsonInsert({ table, conflict, returning: key }, rows);
  if (one !== undefined) {
    for (const row of (await trx.executeQuery<Row>(one)).rows) inserted.add(String(row[key]));
    return inserted;
  }
  // A multi-row VALUES list where rows leave columns to their defaults.
  for (const chunk of chunksWithin(MAX_PARAMETERS, rows, columnsOf)) {
    const returned = await trx
      .insertInto(table)
      .values(chunk)
      .onConflict((oc) => oc.columns(conflict).doNothing())
      .returning(key)
      .execute();
    for (const row of returned) inserted.add(String(row[key]));
  }
  return inserted;
}

async function insertManySkippingPresent(
  trx: AnyDb,
  table: string,
  rows: readonly Row[],
  conflict: readonly string[],
  writes: WriteSink | undefined,
  json: ReadonlySet<string> | undefined,
): Promise<void> {
  const one = jsonInsert({ table, conflict }, rows, json);
  if (one !== undefined) {
    await (writes !== undefined ? writes.add(compiled(one)) : trx.executeQuery(one));
    return;
  }
  for (const chunk of chunksWithin(MAX_PARAMETERS, rows, columnsOf)) {
    const insert = trx
      .insertInto(table)
      .values(chunk)
      .onConflict((oc) => oc.columns(conflict).doNothing());
    if (writes !== undefined) await writes.add(insert);
    else await insert.execute();
  }
}

async function insertRows(trx: AnyDb, table: string, rows: readonly Row[], writes: WriteSink | undefined): Promise<void> {
  const expect = (n: number) => ({ rows: n, what: `insert into ${table}` });
  const one = jsonInsert({ table }, rows);
  if (one !== undefined) {
    await (writes !== undefined ? writes.add(compiled(one), expect(rows.length)) : trx.executeQuery(one));
    return;
  }
  for (const chunk of chunksWithin(MAX_PARAMETERS, rows, columnsOf)) {
    const insert = trx.insertInto(table).values(chunk);
    await (writes !== undefined ? writes.add(insert, expect(chunk.length)) : insert.execute());
  }
}

/** The advisory locks of lockKeys, for the resources bound as $1 (a text array). */
const ADVISORY_LOCKS = `select pg_advisory_xact_lock(s.k) from (
        select distinct hashtextextended(r, 0) as k from unnest(cast($1 as text[])) as r order by k
      ) as s`;

const lockRowsTexts = new Map<string, string>();

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

/** One array parameter: the same text for any number of keys; one key bound as itself (lockRowsText). */
async function lockRows(trx: AnyDb, table: string, keyColumn: string, keys: readonly string[]): Promise<Row[]> {
  const single = keys.length === 1;
  const query = CompiledQuery.raw(lockRowsText(table, keyColumn, single), single ? [keys[0]] : [keys]);
  return (await trx.executeQuery<Row>(query)).rows;
}

/**
 * One statement: the key locks are its InitPlan, which its one-time filter evaluates before the scan
 * starts, so they are taken in their global order before any row is read or locked, as two statements
 * would; and FOR UPDATE returns each row's latest committed version whatever the statement waited on.
 */
async function lockRowsAfterKeyLocks(
  trx: AnyDb,
  resources: readonly string[],
  table: string,
  keyColumn: string,
  keys: readonly string[],
): Promise<Row[]> {
  if (resources.length === 0 || keys.length === 0) {
    await lockKeys(trx, resources);
    return keys.length === 0 ? [] : lockRows(trx, table, keyColumn, keys);
  }
  const single = keys.length === 1;
  const query = CompiledQuery.raw(lockRowsText(table, keyColumn, single, true), [resources, single ? keys[0] : keys]);
  return (await trx.executeQuery<Row>(query)).rows;
}

/**
 * Transaction-scoped advisory locks on the keys' 64-bit hashes, in hash order, one statement binding one
 * array (a collision only serialises two keys). The outer select calls pg_advisory_xact_lock row by row
 * as the sorted subquery yields them.
 */
async function lockKeys(trx: QueryExecutorProvider, resources: readonly string[]): Promise<void> {
  if (resources.length === 0) return;
  await trx.getExecutor().executeQuery(CompiledQuery.raw(ADVISORY_LOCKS, [resources]));
}

/**
 * ctid = ANY(ARRAY(...)) lets the planner fetch the locked rows by tuple id; the FOR UPDATE SKIP LOCKED
 * lock keeps each ctid stable until the DELETE in the same statement removes it.
 */
async function deleteOldestRows(db: QueryExecutorProvider, table: string, column: string, cutoff: Date, n: number): Promise<number> {
  const [t, c] = [sql.table(table), sql.ref(column)];
  const result = await sql`DELETE FROM ${t} WHERE ctid = ANY(ARRAY(
          SELECT ctid FROM ${t} WHERE ${c} < ${cutoff} ORDER BY ${c} LIMIT ${n} FOR UPDATE SKIP LOCKED
        ))`.execute(db);
  return Number(result.numAffectedRows ?? 0n);
}

const PG_TYPES = { integer: 'integer', text: 'text', uuid: 'uuid', json: 'jsonb', timestamp: 'timestamptz' } as const;
const keyedUpdateTexts = new WeakMap<KeyedUpdate, { one: string; many: string }>();

/**
 * updateByKey's texts, parameters in this order: the bound values, then (many rows) the rows as JSON
 * (json-rows.ts) or (one row) its values, then the where values, then the keys (many rows: one array,
 * matched on the table's own key so that rows are found through it whatever the planner guesses of the
 * JSON's row count; one row: the key bound as itself, lockRowsText says why).
 */
function keyedUpdateText(update: KeyedUpdate): { one: string; many: string } {
  let texts = keyedUpdateTexts.get(update);
  if (texts === undefined) {
    const perRow = update.set.filter((c): c is RowColumn => c.from === 'row');
    const bound = update.set.length - perRow.length - update.set.filter((c) => c.from === 'null').length;
    const build = (value: (column: RowColumn, i: number) => string, from: string, whereAt: number, keyMatch: string): string => {
      const t = quoteIdentifier(update.table);
      let [r, b] = [0, 0];
      const sets = update.set.map((column) => {
        const c = quoteIdentifier(column.column);
        if (column.from === 'null') return `${c} = null`;
        if (column.from === 'bound') return `${c} = $${++b}`;
        return `${c} = ${column.add === true ? `${t}.${c} + ` : ''}${value(column, r++)}`;
      });
      const where = update.where.map((column, i) => `${t}.${quoteIdentifier(column)} = $${whereAt + i}`);
      const key = `${t}.${quoteIdentifier(update.key.column)}`;
      return `update ${t} set ${sets.join(', ')}${from} where ${[...where, `${key} ${keyMatch}`].join(' and ')}`;
    };
    // The recordset's columns are named as the table's (from a constant KeyedUpdate), unquoted.
    const columns = [update.key, ...perRow].map((c) => `${c.column} ${PG_TYPES[c.type]}`);
    const keyAt = (whereAt: number) => whereAt + update.where.length;
    const oneWhere = bound + perRow.length + 1;
    const manyWhere = bound + 2;
    texts = {
      one: build((c, i) => `cast($${bound + 1 + i} as ${PG_TYPES[c.type]})`, '', oneWhere, `= $${keyAt(oneWhere)}`),
      many: build(
        (c) => `d.${c.column}`,
        ` from json_to_recordset(cast($${bound + 1} as json)) as d(${columns.join(', ')})`,
        manyWhere,
        `= any($${keyAt(manyWhere)}) and ${quoteIdentifier(update.table)}.${quoteIdentifier(update.key.column)} = d.${update.key.column}`,
      ),
    };
    keyedUpdateTexts.set(update, texts);
  }
  return texts;
}

function updateByKey(
  trx: AnyDb,
  update: KeyedUpdate,
  rows: readonly KeyedValues[],
  bound: KeyedBound,
): { query: Compilable; rows: number }[] {
  const texts = keyedUpdateText(update);
  if (rows.length === 1) {
    const [only] = rows;
    return [{ query: compiled(CompiledQuery.raw(texts.one, [...bound.set, ...only!.values, ...bound.where, only!.key])), rows: 1 }];
  }
  const perRow = update.set.filter((c): c is RowColumn => c.from === 'row');
  const names = [update.key.column, ...perRow.map((c) => c.column)];
  const json = new Set(perRow.filter((c) => c.type === 'json').map((c) => c.column));
  const objects = rows.map((row) => Object.fromEntries(names.map((name, i) => [name, i === 0 ? row.key : row.values[i - 1]])));
  const data = jsonRows(objects, names, json);
  if (data === undefined) return updateByKeyWithCase(trx, MAX_PARAMETERS, update, rows, bound, jsonValue);
  const parameters = [...bound.set, data, ...bound.where, rows.map((row) => row.key)];
  return [{ query: compiled(CompiledQuery.raw(texts.many, parameters)), rows: rows.length }];
}

const jsonValue = (text: string): RawBuilder<unknown> => sql`cast(${text} as jsonb)`;

const unionTexts = new WeakMap<KeyedUnion, { one: string; many: string }>();

/** unionByKeys's texts: each key list one array parameter ($1, $2, …), or one key each, bound as itself. */
function unionText(union: KeyedUnion, single: boolean): string {
  let texts = unionTexts.get(union);
  if (texts === undefined) {
    const build = (match: (parameter: string) => string): string =>
      union.parts
        .map((part) => {
          const own = new Set(part.columns);
          const columns = union.columns.map(({ name, type }) =>
            own.has(name) ? quoteIdentifier(name) : `null::${PG_TYPES[type]} as ${quoteIdentifier(name)}`,
          );
          const where = part.match.map(([column, i]) => `${quoteIdentifier(column)} ${match(`$${i + 1}`)}`).join(' and ');
          return `select '${part.kind}' as "kind", ${columns.join(', ')} from ${quoteIdentifier(part.table)} where ${where}`;
        })
        .join(' union all ');
    texts = { one: build((p) => `= ${p}`), many: build((p) => `= any(${p})`) };
    unionTexts.set(union, texts);
  }
  return single ? texts.one : texts.many;
}

function unionByKeys(union: KeyedUnion, keys: readonly (readonly string[])[]): CompiledQuery {
  const single = keys.every((k) => k.length === 1);
  return CompiledQuery.raw(
    unionText(union, single),
    keys.map((k) => (single ? k[0] : k)),
  );
}

const listTexts = new WeakMap<ListStatement, string>();

/** A list bound as one array parameter: `= any($n)`. */
function listStatement(statement: ListStatement, parameters: readonly unknown[]): CompiledQuery {
  let text = listTexts.get(statement);
  if (text === undefined) {
    text = statement.text({ parameter: (n) => `$${n}`, inList: (n) => `= any($${n})` });
    listTexts.set(statement, text);
  }
  return CompiledQuery.raw(text, [...parameters]);
}

/**
 * Exactly-once across a failover needs every acknowledged commit on a standby before it is acknowledged:
 * with asynchronous replication a commit the old primary acknowledged (and the service answered 201 for)
 * can be missing on the promoted standby, so the command's effect vanishes, or a redelivery applies it
 * again. This reads whether the primary has standbys and none of them synchronous (docs/scaling.md names
 * the settings); undefined when there is nothing to warn about.
 */
async function replicationWarning(db: QueryExecutorProvider): Promise<string | undefined> {
  const { rows } = await sql<{ standbys: number; visible: number; synchronous: number; names: string; commit: string; standby: boolean }>`
    select (select count(*) from pg_stat_replication)::int as standbys,
           (select count(sync_state) from pg_stat_replication)::int as visible,
           (select count(*) from pg_stat_replication where sync_state in ('sync', 'quorum'))::int as synchronous,
           current_setting('synchronous_standby_names') as names,
           current_setting('synchronous_commit') as commit,
           pg_is_in_recovery() as standby`.execute(db);
  const row = rows[0];
  if (row === undefined || row.standby || row.standbys === 0) return undefined;
  const risk = 'a commit acknowledged by this primary can be lost in a failover, and with it an acknowledged command';
  if (row.commit === 'off' || row.commit === 'local') {
    return `synchronous_commit is ${row.commit} on a primary with ${row.standbys} standby(s): ${risk}`;
  }
  // Without pg_read_all_stats the standbys' sync_state is hidden: then synchronous_standby_names tells.
  const noneSynchronous = row.names.trim() === '' || (row.visible > 0 && row.synchronous === 0);
  if (!noneSynchronous) return undefined;
  const why =
    row.names.trim() === '' ? 'synchronous_standby_names is empty' : `none of them is in synchronous_standby_names (${row.names})`;
  return `the primary has ${row.standbys} standby(s) but none synchronous (${why}): ${risk}`;
}

/** PostgreSQL on a server. */
export const postgres: Engine = {
  replicationWarning,
  name: 'postgres',
  adapters: [PostgresAdapter],
  telemetry: { systemName: 'postgresql', system: 'postgresql' },
  maxParameters: MAX_PARAMETERS,
  maxDeleteBatch: Infinity,
  supportsReturning: true,
  bindsArrays: true,
  defersWrites: true,
  ddl: {
    uuid: 'uuid',
    timestamp: 'timestamptz(3)',
    json: 'jsonb',
    key: (n) => `varchar(${n})`,
    text: (n) => `varchar(${n})`,
    identity: 'bigserial',
    clustersOnSurrogate: false,
    indexNamesPerTable: false,
    filteredIndexes: true,
    keyLockTable: false,
  },
  failureOf,
  runTogether,
  insertIfAbsent,
  insertManyIfAbsent,
  insertManySkippingPresent,
  insertRows,
  insertReturning: async (db, table, row, column) => {
    const returned: Row = await db.insertInto(table).values(row).returning(column).executeTakeFirstOrThrow();
    return returned[column];
  },
  firstRows: (query, n) => query.limit(n),
  lockNextPending: async (trx, table, pendingColumn, orderColumn, limit) =>
    await trx
      .selectFrom(table)
      .selectAll()
      .where(pendingColumn, 'is', null)
      .orderBy(orderColumn)
      .limit(limit)
      .forUpdate()
      .skipLocked()
      .execute(),
  jsonValue,
  lockRows,
  lockRowsAfterKeyLocks,
  lockKeys,
  deleteOldestRows,
  updateByKey,
  unionByKeys,
  listStatement,
};

/** PostgreSQL embedded (PGlite): one connection in this process, no standbys to replicate to. */
export const pglite: Engine = { ...postgres, adapters: [PGliteAdapter], replicationWarning: () => Promise.resolve(undefined) };
