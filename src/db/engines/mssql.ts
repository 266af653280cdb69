import {
  MssqlAdapter,
  sql,
  type CompiledQuery,
  type KyselyPlugin,
  type PluginTransformQueryArgs,
  type PluginTransformResultArgs,
  type QueryExecutorProvider,
  type QueryResult,
  type RawBuilder,
  type RootOperationNode,
  type UnknownRow,
} from 'kysely';
import {
  updateByKeyWithCase,
  checkRows,
  chunksWithin,
  codeOf,
  columnsOf,
  errorsIn,
  messageOf,
  NODE_CONNECTION_CODES,
  numberOf,
  type AnyDb,
  type DeferredWrite,
  type Row,
  type StatementRunner,
  type WriteSink,
} from './common.js';
import type { Engine, FailureKind } from './engine.js';

/**
 * SQL Server, through tedious: no ON CONFLICT (a duplicate-key error ends only its statement, so the
 * transaction goes on), OUTPUT instead of RETURNING, UPDLOCK/READPAST hints, sp_getapplock, every write
 * run as its own statement, JSON as nvarchar(max).
 *
 * Lock waits are bounded per connection by SET LOCK_TIMEOUT, sent as a plain batch at connect (see
 * src/db/mssql.ts): sent through Kysely it would be a wasted round trip, since Kysely runs every
 * statement inside sp_executesql, and SQL Server restores SET options when that dynamic batch returns.
 */

/**
 * SQL Server refuses a request with more than 2,100 parameters (sp_executesql's own statement and
 * declaration count among them), so the limit keeps a margin.
 */
const MAX_PARAMETERS = 2000;

/**
 * The largest batch one DELETE takes. Past about 5,000 locks on one table or index in one statement,
 * SQL Server escalates the row locks to a table lock, which READPAST does not skip: every claim would
 * wait behind the pruner. Each deleted row is a key lock in every index of the table, plus page intent
 * locks, so the batch stays well below that.
 */
export const MSSQL_MAX_DELETE_BATCH = 2000;

/** Binary (case- and accent-sensitive) comparison, as PostgreSQL compares text under its default collation. */
export const MSSQL_KEY_COLLATION = 'Latin1_General_100_BIN2';

/**
 * sp_getapplock reports a lock timeout (-1) and a deadlock victim (-3) as return codes, not errors, and
 * RAISERROR/THROW may not raise SQL Server's own 1222 or 1205: lockKeys raises these user error numbers
 * instead, classified as the errors they stand for.
 */
export const MSSQL_APPLOCK_TIMEOUT = 51222;
export const MSSQL_APPLOCK_DEADLOCK = 51205;

const FAILURE_NUMBERS: ReadonlyMap<number, FailureKind> = new Map([
  [2627, 'duplicate'],
  [2601, 'duplicate'],
  [1222, 'lock-timeout'],
  [MSSQL_APPLOCK_TIMEOUT, 'lock-timeout'],
  [1205, 'deadlock'],
  [MSSQL_APPLOCK_DEADLOCK, 'deadlock'],
]);

/**
 * tedious's codes: ESOCKET/ETIMEOUT/ELOGIN/EINSTLOOKUP when a connection cannot be opened, ECLOSE when
 * it drops under a request, EINVALIDSTATE for a request on a dead connection, ETIMEOUT also for a request
 * past its requestTimeout (tedious cancels it: the server stopped answering).
 */
const CONNECTION_CODES: ReadonlySet<string> = new Set([
  'ESOCKET',
  'ECONNCLOSED',
  'ELOGIN',
  'ETIMEOUT',
  'ECLOSE',
  'EINVALIDSTATE',
  'EINSTLOOKUP',
]);

/**
 * tedious's "Failed to connect to host:port"; Kysely's MSSQL driver's "connection ended"; and tarn's
 * acquire timeout, which keeps only the last connect error's message (no code).
 */
const CONNECTION_MESSAGES = /^Failed to connect to |connection ended without ever completing/i;

/** tarn says this when no connection came free and no connection attempt failed meanwhile. */
const POOL_EXHAUSTED = /^operation timed out for an unknown reason$/;

function failureOf(error: unknown): FailureKind | undefined {
  const number = numberOf(error);
  const kind = number === undefined ? undefined : FAILURE_NUMBERS.get(number);
  if (kind !== undefined) return kind;
  const code = codeOf(error);
  if (code !== undefined && (CONNECTION_CODES.has(code) || NODE_CONNECTION_CODES.has(code))) return 'connection-lost';
  const message = messageOf(error);
  if (message === undefined) return undefined;
  if (POOL_EXHAUSTED.test(message)) return 'busy';
  return CONNECTION_MESSAGES.test(message) ? 'connection-lost' : undefined;
}

const isDuplicate = (error: unknown): boolean => errorsIn(error).some((e) => failureOf(e) === 'duplicate');

/** Each write runs when added, as a statement of its own: nothing is held. */
async function runTogether(trx: StatementRunner, writes: readonly DeferredWrite[]): Promise<void> {
  for (const write of writes) checkRows(write, Number((await trx.executeQuery(write.query.compile())).numAffectedRows ?? 0n));
}

/** A duplicate-key error ends only the statement, so the transaction goes on. */
async function insertIfAbsent(trx: AnyDb, table: string, row: Row): Promise<boolean> {
  try {
    await trx.insertInto(table).values(row).executeTakeFirst();
    return true;
  } catch (error) {
    if (isDuplicate(error)) return false;
    throw error;
  }
}

/** A multi-row INSERT fails whole on one duplicate, so each row is its own statement. */
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

/** A duplicate fails its multi-row statement alone; then that statement's rows go one by one, at once. */
async function insertManySkippingPresent(trx: AnyDb, table: string, rows: readonly Row[]): Promise<void> {
  for (const chunk of chunksWithin(MAX_PARAMETERS, rows, columnsOf)) {
    try {
      await trx.insertInto(table).values(chunk).execute();
    } catch (error) {
      if (!isDuplicate(error)) throw error;
      for (const row of chunk) await insertIfAbsent(trx, table, row);
    }
  }
}

async function insertRows(trx: AnyDb, table: string, rows: readonly Row[], writes: WriteSink | undefined): Promise<void> {
  for (const chunk of chunksWithin(MAX_PARAMETERS, rows, columnsOf)) {
    const insert = trx.insertInto(table).values(chunk);
    await (writes !== undefined ? writes.add(insert, { rows: chunk.length, what: `insert into ${table}` }) : insert.execute());
  }
}

/** UPDLOCK, ROWLOCK hints on a seek of the key, one statement per parameter chunk. */
async function lockRows(trx: AnyDb, table: string, keyColumn: string, keys: readonly string[]): Promise<Row[]> {
  const locked: Row[] = [];
  for (const chunk of chunksWithin(MAX_PARAMETERS, keys, 1)) {
    const { rows } = await sql<Row>`SELECT * FROM ${sql.table(table)} WITH (UPDLOCK, ROWLOCK)
    WHERE ${sql.ref(keyColumn)} IN (${sql.join(chunk)}) ORDER BY ${sql.ref(keyColumn)}`.execute(trx);
    locked.push(...rows);
  }
  return locked;
}

/**
 * sp_getapplock owned by the transaction, one call per key in key order, as one batch per parameter
 * chunk; a refused lock (a return code below 0) raises.
 */
async function lockKeys(trx: QueryExecutorProvider, resources: readonly string[]): Promise<void> {
  if (resources.length === 0) return;
  for (const chunk of chunksWithin(MAX_PARAMETERS, resources, 1)) await appLocks(chunk).execute(trx);
}

/**
 * One T-SQL batch taking each resource's application lock in the order given; each call is made only
 * while the previous ones were granted (0 or 1), and the first refusal raises. @LockTimeout is left at
 * its default, the session's LOCK_TIMEOUT (the service's lock bound). Resource names longer than
 * sp_getapplock's 255 characters are cut there, which at worst makes two keys one lock.
 */
function appLocks(resources: readonly string[]): RawBuilder<unknown> {
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

/** READPAST skips rows another transaction holds; the batch stays below lock escalation. */
async function deleteOldestRows(db: QueryExecutorProvider, table: string, column: string, cutoff: Date, n: number): Promise<number> {
  const c = sql.ref(column);
  const result = await sql`WITH batch AS (
          SELECT TOP (${n}) * FROM ${sql.table(table)} WITH (ROWLOCK, UPDLOCK, READPAST)
          WHERE ${c} < ${cutoff} ORDER BY ${c}
        ) DELETE FROM batch`.execute(db);
  return Number(result.numAffectedRows ?? 0n);
}

async function lockNextPending(trx: AnyDb, table: string, pendingColumn: string, orderColumn: string, n: number): Promise<Row[]> {
  const { rows } = await sql<Row>`SELECT TOP (${n}) * FROM ${sql.table(table)} WITH (ROWLOCK, UPDLOCK, READPAST)
      WHERE ${sql.ref(pendingColumn)} IS NULL ORDER BY ${sql.ref(orderColumn)}`.execute(trx);
  return rows;
}

const jsonValue = (text: string): RawBuilder<unknown> => sql`${text}`;

/** SQL Server. */
export const mssql: Engine = {
  name: 'mssql',
  adapters: [MssqlAdapter],
  telemetry: { systemName: 'microsoft.sql_server', system: 'mssql' },
  maxParameters: MAX_PARAMETERS,
  maxDeleteBatch: MSSQL_MAX_DELETE_BATCH,
  supportsReturning: false,
  bindsArrays: false,
  defersWrites: false,
  ddl: {
    uuid: 'uniqueidentifier',
    timestamp: 'datetimeoffset(3)',
    json: 'nvarchar(max)',
    key: (n) => `nvarchar(${n}) collate ${MSSQL_KEY_COLLATION}`,
    // nvarchar counts UTF-16 code units, the schemas count characters: a character outside the
    // Basic Multilingual Plane (an emoji) takes two units, so n characters need up to 2n units.
    text: (n) => `nvarchar(${2 * n})`,
    identity: 'bigint identity(1,1)',
    clustersOnSurrogate: true,
    indexNamesPerTable: true,
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
    const returned: Row = await db.insertInto(table).values(row).output(`inserted.${column}`).executeTakeFirstOrThrow();
    return returned[column];
  },
  firstRows: (query, n) => query.top(n),
  lockNextPending,
  jsonValue,
  lockRows,
  lockRowsAfterKeyLocks: async (trx, resources, table, keyColumn, keys) => {
    await lockKeys(trx, resources);
    return keys.length === 0 ? [] : lockRows(trx, table, keyColumn, keys);
  },
  lockKeys,
  deleteOldestRows,
  updateByKey: (trx, update, rows, bound) => updateByKeyWithCase(trx, MAX_PARAMETERS, update, rows, bound, jsonValue),
  unionByKeys: (): CompiledQuery | undefined => undefined,
  listStatement: (): CompiledQuery | undefined => undefined,
  // Always-on availability groups are not read here: nothing to warn about that the service can tell.
  replicationWarning: () => Promise.resolve(undefined),
};

/**
 * Parses the JSON columns of every result row: SQL Server stores JSON in nvarchar(max), while
 * PostgreSQL's drivers return jsonb parsed. Installed on the SQL Server Kysely instance only
 * (src/db/mssql.ts), so repositories read a JSON column's value the same way on both.
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
