import { CompiledQuery, MysqlAdapter, MysqlDialect, sql, type DialectAdapter, type QueryExecutorProvider, type RawBuilder } from 'kysely';
import {
  updateByKeyWithCase,
  checkRows,
  chunksWithin,
  codeOf,
  columnsOf,
  errorsIn,
  messageOf,
  type AnyDb,
  type DeferredWrite,
  type Row,
  type StatementRunner,
  type WriteSink,
} from './common.js';
import type { Engine, FailureKind, KeyedUnion } from './engine.js';
import { MYSQL_POOL_ACQUIRE_TIMEOUT, mysqlFailureKind } from './mysql-errors.js';

/**
 * MariaDB (10.6+) and MySQL (8.0+), through mysql2: no ON CONFLICT and no RETURNING on MySQL (one code
 * path for both), FOR UPDATE SKIP LOCKED, key locks as rows of a table of their own, every write run as
 * its own statement, JSON as text (MariaDB's JSON is LONGTEXT; the opener parses it back).
 *
 * Lock waits are bounded per session by innodb_lock_wait_timeout, set when the pool opens a connection
 * (src/schema/mysql.ts), in whole seconds.
 */

/** The protocol counts a prepared statement's placeholders in 16 bits. */
const MAX_PARAMETERS = 65_535;

/**
 * The largest batch one DELETE takes. InnoDB does not escalate row locks, but every deleted row is held
 * locked and kept in the undo log until the statement commits: a bounded batch keeps each prune short.
 */
export const MYSQL_MAX_DELETE_BATCH = 5000;

/** The table whose rows lockKeys locks: one row per resource ever locked (src/schema/migrations/0007). */
export const KEY_LOCK_TABLE = 'key_locks';

/** mysql2's own messages for errors that carry no code; the opener's busy pool has its code. */
const MYSQL2_MESSAGES = /^(Queue limit reached\.|No connections available\.|Can't add new command when connection is in closed state)$/;

/**
 * True for an error mysql2 (or the opener's pool) raised: a server error carries its SQLSTATE, a
 * connection error mysql2's `fatal` flag. failures.ts asks every engine about every error: another
 * driver's or a fetch's socket error (ENOTFOUND in a cause) is not read here.
 */
function raisedByMysql(error: unknown): boolean {
  let current = error;
  for (let depth = 0; depth < 5 && typeof current === 'object' && current !== null; depth++) {
    const e = current as { sqlState?: unknown; fatal?: unknown; cause?: unknown };
    if (typeof e.sqlState === 'string' || typeof e.fatal === 'boolean') return true;
    if (codeOf(current) === MYSQL_POOL_ACQUIRE_TIMEOUT || MYSQL2_MESSAGES.test(messageOf(current) ?? '')) return true;
    current = e.cause;
  }
  return false;
}

const failureOf = (error: unknown): FailureKind | undefined => (raisedByMysql(error) ? mysqlFailureKind(error) : undefined);

const isDuplicate = (error: unknown): boolean => errorsIn(error).some((e) => failureOf(e) === 'duplicate');

/** Each write runs when added, as a statement of its own: nothing is held. */
async function runTogether(trx: StatementRunner, writes: readonly DeferredWrite[]): Promise<void> {
  for (const write of writes) checkRows(write, Number((await trx.executeQuery(write.query.compile())).numAffectedRows ?? 0n));
}

/**
 * A plain INSERT, its duplicate-key error caught: the error ends only the statement, so the transaction
 * goes on. ON DUPLICATE KEY UPDATE would not tell an insert from a duplicate: with mysql2's FOUND_ROWS
 * both count one row. A concurrent insert of the same key waits on the other transaction's row lock.
 */
async function insertIfAbsent(trx: AnyDb, table: string, row: Row): Promise<boolean> {
  try {
    await trx.insertInto(table).values(row).executeTakeFirst();
    return true;
  } catch (error) {
    if (isDuplicate(error)) return false;
    throw error;
  }
}

/** A multi-row INSERT fails whole on one duplicate, and would not say which rows it inserted: one statement per row. */
async function insertManyIfAbsent(
  trx: AnyDb,
  table: string,
  rows: readonly Row[],
  _conflict: readonly string[],
  key: string,
): Promise<Set<string>> {
  const inserted = new Set<string>();
  for (const row of rows) if (await insertIfAbsent(trx, table, row)) inserted.add(String(row[key]));
  return inserted;
}

/**
 * ON DUPLICATE KEY UPDATE of a key column to itself: a present row is left as it is, and (unlike
 * INSERT IGNORE, which turns strict-mode errors into warnings) any other error still fails.
 */
async function insertManySkippingPresent(
  trx: AnyDb,
  table: string,
  rows: readonly Row[],
  conflict: readonly string[],
  writes: WriteSink | undefined,
): Promise<void> {
  const column = conflict[0];
  if (column === undefined) throw new Error(`insert into ${table}: no conflict column named`);
  for (const chunk of chunksWithin(MAX_PARAMETERS, rows, columnsOf)) {
    const insert = trx
      .insertInto(table)
      .values(chunk)
      .onDuplicateKeyUpdate({ [column]: sql.ref(column) });
    await (writes !== undefined ? writes.add(insert) : insert.execute());
  }
}

async function insertRows(trx: AnyDb, table: string, rows: readonly Row[], writes: WriteSink | undefined): Promise<void> {
  for (const chunk of chunksWithin(MAX_PARAMETERS, rows, columnsOf)) {
    const insert = trx.insertInto(table).values(chunk);
    await (writes !== undefined ? writes.add(insert, { rows: chunk.length, what: `insert into ${table}` }) : insert.execute());
  }
}

/** SELECT … FOR UPDATE on the key, in key order (InnoDB locks rows as the index scan reaches them). */
async function lockRows(trx: AnyDb, table: string, keyColumn: string, keys: readonly string[]): Promise<Row[]> {
  const locked: Row[] = [];
  for (const chunk of chunksWithin(MAX_PARAMETERS, keys, 1)) {
    const { rows } = await sql<Row>`SELECT * FROM ${sql.table(table)}
      WHERE ${sql.ref(keyColumn)} IN (${sql.join(chunk)}) ORDER BY ${sql.ref(keyColumn)} FOR UPDATE`.execute(trx);
    locked.push(...rows);
  }
  return locked;
}

/**
 * A row per resource in KEY_LOCK_TABLE, inserted or (present) its locked_at updated, in the order given: the
 * insert or the update holds the row's exclusive lock until the transaction ends, and a concurrent one
 * waits for it (ON DUPLICATE KEY UPDATE takes an exclusive lock on a duplicate, not the shared lock a
 * plain INSERT takes, so three waiters cannot deadlock on the upgrade). GET_LOCK is not used: its locks
 * belong to the session, not the transaction, and would outlive a commit.
 */
async function lockKeys(trx: QueryExecutorProvider, resources: readonly string[]): Promise<void> {
  for (const chunk of chunksWithin(MAX_PARAMETERS, resources, 1)) {
    await sql`INSERT INTO ${sql.table(KEY_LOCK_TABLE)} (resource) VALUES ${sql.join(chunk.map((r) => sql`(${r})`))}
      ON DUPLICATE KEY UPDATE locked_at = CURRENT_TIMESTAMP(3)`.execute(trx);
  }
}

/** Each table's primary-key columns, read once per process: deleteOldestRows joins on them. */
const primaryKeys = new Map<string, Promise<string[]>>();

function primaryKeyOf(db: QueryExecutorProvider, table: string): Promise<string[]> {
  let columns = primaryKeys.get(table);
  if (columns === undefined) {
    columns = sql<{ name: string }>`SELECT column_name AS name FROM information_schema.key_column_usage
        WHERE table_schema = database() AND table_name = ${table} AND constraint_name = 'PRIMARY'
        ORDER BY ordinal_position`
      .execute(db)
      .then(({ rows }) => {
        if (rows.length === 0) throw new Error(`table ${table} has no primary key`);
        return rows.map((r) => r.name);
      });
    columns.catch(() => primaryKeys.delete(table));
    primaryKeys.set(table, columns);
  }
  return columns;
}

/**
 * A DELETE joined to a derived table of the oldest rows' keys, locked with SKIP LOCKED: a DELETE may not
 * name its own table in a subquery (1093) nor LIMIT inside IN (…), but a derived table with LIMIT is
 * materialised first, and MariaDB and MySQL accept it.
 */
async function deleteOldestRows(db: QueryExecutorProvider, table: string, column: string, cutoff: Date, n: number): Promise<number> {
  const key = await primaryKeyOf(db, table);
  const [t, c] = [sql.table(table), sql.ref(column)];
  const keys = sql.join(key.map((k) => sql.ref(k)));
  const on = sql.join(
    key.map((k) => sql`t.${sql.ref(k)} = b.${sql.ref(k)}`),
    sql` AND `,
  );
  const result = await sql`DELETE t FROM ${t} AS t JOIN (
          SELECT ${keys} FROM ${t} WHERE ${c} < ${cutoff} ORDER BY ${c} LIMIT ${n} FOR UPDATE SKIP LOCKED
        ) AS b ON ${on}`.execute(db);
  return Number(result.numAffectedRows ?? 0n);
}

const unionTexts = new WeakMap<KeyedUnion, string>();

/**
 * unionByKeys for one key per list (a message at a time, the common case): one statement instead of
 * one per part, its text rendered once per union. MySQL has no array parameter, and `?` binds by
 * position, so a key list matched in several parts is bound once per use. With longer lists the
 * caller's chunked IN lists are used (undefined), as before.
 */
function unionByKeys(union: KeyedUnion, keys: readonly (readonly string[])[]): CompiledQuery | undefined {
  if (keys.length === 0 || !keys.every((k) => k.length === 1)) return undefined;
  let text = unionTexts.get(union);
  if (text === undefined) {
    text = union.parts
      .map((part) => {
        const own = new Set(part.columns);
        const columns = union.columns.map(({ name }) => (own.has(name) ? `\`${name}\`` : `null as \`${name}\``));
        const where = part.match.map(([column]) => `\`${column}\` = ?`).join(' and ');
        return `select '${part.kind}' as \`kind\`, ${columns.join(', ')} from \`${part.table}\` where ${where}`;
      })
      .join(' union all ');
    unionTexts.set(union, text);
  }
  const parameters = union.parts.flatMap((part) => part.match.map(([, i]) => keys[i]?.[0]));
  return CompiledQuery.raw(text, parameters);
}

/** A JSON text as it is: MariaDB's JSON column is text, and MySQL parses a string assigned to a JSON column. */
const jsonValue = (text: string): RawBuilder<unknown> => sql`${text}`;

/** MySQL, and MariaDB where the opener did not say it is MariaDB (a Kysely MysqlDialect of its own). */
export const mysql: Engine = {
  name: 'mysql',
  adapters: [MysqlAdapter],
  telemetry: { systemName: 'mysql', system: 'mysql' },
  maxParameters: MAX_PARAMETERS,
  maxDeleteBatch: MYSQL_MAX_DELETE_BATCH,
  // MariaDB has INSERT … RETURNING, MySQL does not: one code path for both.
  supportsReturning: false,
  bindsArrays: false,
  defersWrites: false,
  ddl: {
    uuid: 'char(36)',
    timestamp: 'datetime(3)',
    // MariaDB: LONGTEXT checked by json_valid; MySQL: its binary JSON type.
    json: 'json',
    // The database's collation is utf8mb4_bin (db:create): keys compare byte for byte.
    key: (n) => `varchar(${n})`,
    text: (n) => `varchar(${n})`,
    identity: 'bigint auto_increment',
    clustersOnSurrogate: false,
    indexNamesPerTable: true,
    filteredIndexes: false,
    keyLockTable: true,
  },
  failureOf,
  runTogether,
  insertIfAbsent,
  insertManyIfAbsent,
  insertManySkippingPresent,
  insertRows,
  insertReturning: async (db, table, row) => (await db.insertInto(table).values(row).executeTakeFirstOrThrow()).insertId,
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
  lockRowsAfterKeyLocks: async (trx, resources, table, keyColumn, keys) => {
    await lockKeys(trx, resources);
    return keys.length === 0 ? [] : lockRows(trx, table, keyColumn, keys);
  },
  lockKeys,
  deleteOldestRows,
  updateByKey: (trx, update, rows, bound) => updateByKeyWithCase(trx, MAX_PARAMETERS, update, rows, bound, jsonValue, 'signed'),
  unionByKeys,
  listStatement: (): CompiledQuery | undefined => undefined,
  // Replication is not read here: nothing to warn about that the service can tell.
  replicationWarning: () => Promise.resolve(undefined),
};

/**
 * The adapter of a Kysely instance over a MariaDB server: MySQL's SQL, and MySQL's adapter in every
 * other respect. Its class is what tells the engine registry the server is MariaDB.
 */
export class MariadbAdapter extends MysqlAdapter {}

/**
 * Kysely's MysqlDialect over a server known to be MariaDB: the opener (src/schema/mysql.ts) asks the
 * server's version once and picks this dialect or MysqlDialect.
 */
export class MariadbDialect extends MysqlDialect {
  override createAdapter(): DialectAdapter {
    return new MariadbAdapter();
  }
}

/**
 * MariaDB: the MySQL engine (one code path for both), named as OpenTelemetry names it. Registered
 * before `mysql`, whose adapter MariadbAdapter extends.
 */
export const mariadb: Engine = { ...mysql, adapters: [MariadbAdapter], telemetry: { systemName: 'mariadb', system: 'mariadb' } };
