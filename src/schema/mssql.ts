import { Kysely, MssqlAdapter, MssqlDialect, sql, type DialectAdapter, type KyselyPlugin } from 'kysely';
import { DEFAULT_MIGRATION_TABLE } from 'kysely/migration';
import * as tarn from 'tarn';
import * as tedious from 'tedious';
import {
  DatabasePermissionError,
  DatabaseUnavailableError,
  DatabaseUrlError,
  type DatabaseHandle,
  type DatabaseOptions,
} from './handle.js';
import { JSON_COLUMNS, type Database } from './database.js';
import { ParseJsonColumnsPlugin } from '../db/dialect.js';

/**
 * SQL Server through tedious: URL parsing, session settings, the dialect, database creation. Loaded
 * only when a `mssql://` or `sqlserver://` URL is used (create-database.ts imports it on demand), so
 * the other databases do not carry tedious in memory.
 */

/** Where and how to reach SQL Server, as parsed from a `mssql://` or `sqlserver://` URL. */
export interface MssqlSettings {
  server: string;
  port: number;
  database: string;
  user: string;
  password: string;
  encrypt: boolean;
  trustServerCertificate: boolean;
  instanceName: string | undefined;
}

/** Parses `mssql://user:password@host:port/database?encrypt=true&trustServerCertificate=true`. */
export function parseMssqlUrl(url: string): MssqlSettings {
  let u: URL;
  let database: string;
  let user: string;
  let password: string;
  try {
    u = new URL(url.replace(/^sqlserver:/, 'mssql:'));
    database = decodeURIComponent(u.pathname.replace(/^\//, ''));
    user = decodeURIComponent(u.username);
    password = decodeURIComponent(u.password);
  } catch {
    // No cause attached: URL's TypeError carries the input, and the input carries the password.
    throw new DatabaseUrlError('the SQL Server URL is malformed (percent-encode reserved characters in the password)');
  }
  if (u.hostname === '') throw new DatabaseUrlError('the SQL Server URL must name a host: mssql://user:pass@host:1433/bookstore');
  if (database === '') throw new DatabaseUrlError('the SQL Server URL must name a database: mssql://user:pass@host:1433/bookstore');
  if (!/^[A-Za-z0-9_-]{1,100}$/.test(database))
    throw new DatabaseUrlError('the SQL Server database name may use letters, digits, _ and - only');
  const flag = (name: string, fallback: boolean) => {
    const v = u.searchParams.get(name);
    return v === null ? fallback : v === 'true' || v === '1';
  };
  return {
    server: u.hostname,
    port: u.port === '' ? 1433 : Number(u.port),
    database,
    user,
    password,
    encrypt: flag('encrypt', true),
    trustServerCertificate: flag('trustServerCertificate', false),
    instanceName: u.searchParams.get('instanceName') ?? undefined,
  };
}

/** `host:port`, or `host\instance` for a named instance: what an operator would type to reach it. */
function mssqlAddress(s: MssqlSettings): string {
  return s.instanceName === undefined ? `${s.server}:${s.port}` : `${s.server}\\${s.instanceName}`;
}

export interface TediousTimeouts {
  /** Bound on opening a connection (TCP, TLS, login). */
  connectTimeoutMs: number;
  /** Bound on one request; a backstop above the lock timeout, so nothing waits forever on a stuck server. */
  requestTimeoutMs: number;
}

/** The tedious connection configuration for one database of the server the settings name. */
export function tediousConfig(s: MssqlSettings, database: string, timeouts: TediousTimeouts): tedious.ConnectionConfiguration {
  return {
    server: s.server,
    authentication: { type: 'default', options: { userName: s.user, password: s.password } },
    options: {
      database,
      ...(s.instanceName === undefined ? { port: s.port } : { instanceName: s.instanceName }),
      encrypt: s.encrypt,
      trustServerCertificate: s.trustServerCertificate,
      connectTimeout: timeouts.connectTimeoutMs,
      requestTimeout: timeouts.requestTimeoutMs,
      // A duplicate-key error must end only its statement, so the claim's transaction can go on.
      abortTransactionOnError: false,
      useUTC: true,
      // uniqueidentifier values read back in lower case, the canonical form the service writes and
      // compares (tedious's default is upper case).
      lowerCaseGuids: true,
    },
  };
}

/** Lock waits are bounded by LOCK_TIMEOUT; a request may run this much longer before tedious cancels it. */
const REQUEST_TIMEOUT_MARGIN_MS = 30_000;

/** The session setting that bounds every lock wait, as PostgreSQL's lock_timeout does. */
export function lockTimeoutStatement(lockTimeoutMs: number): string {
  return `SET LOCK_TIMEOUT ${Math.max(0, Math.trunc(lockTimeoutMs))}`;
}

/**
 * The settings every pooled session makes before its first statement, whatever the server's or the
 * login's defaults (`sp_configure 'user options'` can turn NOCOUNT or XACT_ABORT on for everyone):
 * - NOCOUNT OFF: the service decides outcomes on row counts (a reservation, a stock update, a
 *   take-over); without them every update would look like "no row matched".
 * - XACT_ABORT OFF: a duplicate-key error on the claim must end only its statement, so the claim's
 *   transaction goes on to read the winner's record (tedious's abortTransactionOnError: false says the same).
 * - LOCK_TIMEOUT: the in-flight bound on every lock wait.
 */
export function sessionSettingsBatch(lockTimeoutMs: number): string {
  return `SET NOCOUNT OFF; SET XACT_ABORT OFF; ${lockTimeoutStatement(lockTimeoutMs)};`;
}

/** A data-changing statement: its row count decides what happened, so SQL Server must report one. */
const DML = /^\s*(insert|update|delete|merge)\b|^\s*with\b[\s\S]*\b(insert|update|delete|merge)\b/i;

/** A change whose row count the server did not report: an error, never "no row matched". */
export class MissingRowCountError extends Error {
  override readonly name = 'MissingRowCountError';
}

/**
 * A tedious connection that makes the service's session settings (sessionSettingsBatch) once, at connect.
 * The SETs must travel as a plain SQL batch: Kysely sends every statement through sp_executesql, and
 * SQL Server restores a SET option when the dynamic batch that set it returns, so a SET sent through
 * Kysely bounds nothing after itself. A data-changing statement that comes back without a row count
 * (NOCOUNT turned on behind the service's back) fails instead of reading as zero rows.
 */
class LockBoundedConnection extends tedious.Connection {
  readonly #lockTimeoutMs: number;

  constructor(config: tedious.ConnectionConfiguration, lockTimeoutMs: number) {
    super(config);
    this.#lockTimeoutMs = lockTimeoutMs;
  }

  override connect(connectListener?: (err?: Error) => void): void {
    super.connect((error?: Error) => {
      if (error) {
        connectListener?.(error);
        return;
      }
      this.execSqlBatch(
        new tedious.Request(sessionSettingsBatch(this.#lockTimeoutMs), (setError) => {
          // The pool never sees a connection that failed to connect, so it cannot close it: close it here.
          if (setError) this.close();
          connectListener?.(setError ?? undefined);
        }),
      );
    });
  }

  override execSql(request: tedious.Request): void {
    requireRowCount(request);
    super.execSql(request);
  }

  /**
   * SQL Server ends some transactions itself: a deadlock victim (1205) is rolled back whole, and the
   * ENVCHANGE that says so makes tedious forget the transaction (inTransaction false). Kysely still
   * rolls back after the failed statement; a ROLLBACK sent then fails (3903, no corresponding BEGIN
   * TRANSACTION) and Kysely throws that error instead of the 1205, which is then neither retried nor
   * answered as busy. With nothing left to roll back, the rollback succeeds without a round trip.
   */
  override rollbackTransaction(callback: RollbackCallback, name?: string): void {
    if (!this.inTransaction) {
      queueMicrotask(() => callback(undefined));
      return;
    }
    super.rollbackTransaction(callback, name);
  }
}

type RollbackCallback = Parameters<tedious.Connection['rollbackTransaction']>[0];

/** Makes a data-changing request fail when no DONE token of it carried a row count. */
export function requireRowCount(request: tedious.Request): void {
  if (!DML.test(request.sqlTextOrProcedure ?? '')) return;
  let counted = false;
  const seen = (rowCount: number | undefined) => {
    if (rowCount !== undefined) counted = true;
  };
  request.on('doneInProc', seen);
  request.on('doneProc', seen);
  request.on('done', seen);
  const complete = request.callback;
  request.callback = (error, rowCount, rows) => {
    const missing =
      error || counted
        ? undefined
        : new MissingRowCountError('SQL Server reported no row count for a data-changing statement (is NOCOUNT on for this session?)');
    complete.call(request, error ?? missing, rowCount, rows);
  };
}

/**
 * The principal the migration lock is checked against. Kysely uses 'dbo', which only db_owner members
 * may name: a contained user with DDL rights alone (Azure SQL) would be refused. Every user belongs to
 * public, and the lock is the same lock whichever principal is named.
 */
export const MIGRATION_LOCK_PRINCIPAL = 'public';

/**
 * Kysely's migration lock is sp_getapplock, which waits only @@LOCK_TIMEOUT by default (bounded on
 * these sessions) and reports a timeout as a return code that Kysely ignores: a second replica would
 * then migrate without the lock. Wait for it without a bound (the request timeout still applies) and
 * fail loudly when it is refused.
 */
class MssqlServiceAdapter extends MssqlAdapter {
  override async acquireMigrationLock(db: Kysely<unknown>): Promise<void> {
    await sql`DECLARE @result int;
EXEC @result = sp_getapplock ${MIGRATION_LOCK}, @LockMode = ${sql.lit('Exclusive')}, @LockOwner = ${sql.lit('Session')}, @LockTimeout = -1;
IF @result < 0 RAISERROR('the migration lock was not granted (sp_getapplock returned %d)', 16, 1, @result);`.execute(db);
  }

  override async releaseMigrationLock(db: Kysely<unknown>): Promise<void> {
    await sql`EXEC sp_releaseapplock ${MIGRATION_LOCK}, @LockOwner = ${sql.lit('Session')}`.execute(db);
  }
}

/** The application lock that serialises migrations: its owner principal and resource name. */
const MIGRATION_LOCK = sql`@DbPrincipal = ${sql.lit(MIGRATION_LOCK_PRINCIPAL)}, @Resource = ${sql.lit(DEFAULT_MIGRATION_TABLE)}`;

class MssqlServiceDialect extends MssqlDialect {
  override createAdapter(): DialectAdapter {
    return new MssqlServiceAdapter();
  }
}

/** The Kysely dialect for SQL Server: pool bounds, session settings and parameter types this service needs. */
export function mssqlDialect(settings: MssqlSettings, options: DatabaseOptions): MssqlDialect {
  const connectTimeoutMs = options.connectTimeoutMs ?? 15_000;
  const timeouts = { connectTimeoutMs, requestTimeoutMs: Math.trunc(options.lockTimeoutMs) + REQUEST_TIMEOUT_MARGIN_MS };
  return new MssqlServiceDialect({
    tarn: {
      ...tarn,
      options: {
        min: 0,
        max: options.poolMax ?? 10,
        acquireTimeoutMillis: connectTimeoutMs,
        createTimeoutMillis: connectTimeoutMs,
      },
    },
    tedious: {
      ...tedious,
      // Kysely binds every Date as tedious DateTime, which rounds to 1/300 s (x.005 s is stored as
      // x.007 s). The columns are datetimeoffset(3): bind Dates as datetimeoffset so the stored instant
      // is the one the service computed, to the millisecond, as on PostgreSQL.
      TYPES: { ...tedious.TYPES, DateTime: tedious.TYPES.DateTimeOffset },
      connectionFactory: () => new LockBoundedConnection(tediousConfig(settings, settings.database, timeouts), options.lockTimeoutMs),
    },
  });
}

function connectOnce(config: tedious.ConnectionConfiguration): Promise<tedious.Connection> {
  return new Promise((resolve, reject) => {
    const connection = new tedious.Connection(config);
    connection.connect((error) => (error ? reject(error) : resolve(connection)));
  });
}

/**
 * Creates the database when it is missing, with READ_COMMITTED_SNAPSHOT on: readers (GET /stock, the
 * inbox listing, the metrics gauges) then read the last committed version instead of waiting on rows
 * that in-flight commands hold, which SQL Server's default (off) would make them do. EXEC() accepts
 * only string literals and variables, not a function call such as QUOTENAME(), so each statement is
 * built in a variable first. Two replicas starting at once may both see it missing: the loser's
 * "already exists" (1801) is not an error.
 */
export const ENSURE_DATABASE_SQL = `IF DB_ID(@name) IS NULL
BEGIN
  DECLARE @create nvarchar(300) = N'CREATE DATABASE ' + QUOTENAME(@name);
  DECLARE @snapshot nvarchar(300) = N'ALTER DATABASE ' + QUOTENAME(@name) + N' SET READ_COMMITTED_SNAPSHOT ON';
  BEGIN TRY
    EXEC (@create);
    EXEC (@snapshot);
  END TRY
  BEGIN CATCH
    IF ERROR_NUMBER() <> 1801 OR DB_ID(@name) IS NULL THROW;
  END CATCH
END`;

/** Whether the connected database reads committed versions (1) or waits on writers' locks (0). */
export const READ_COMMITTED_SNAPSHOT_SQL =
  'SELECT CAST(is_read_committed_snapshot_on AS int) AS rcsi FROM sys.databases WHERE database_id = DB_ID()';

/**
 * SQL Server errors that mean "not allowed", not "not reachable": login failed (18456), a database
 * the login cannot open (4060), a server principal without access to it (916), CREATE DATABASE
 * denied (262), a permission denied on an object or statement (229, 230, 297, 300, 15247).
 */
const MSSQL_PERMISSION_ERRORS = new Set([18456, 4060, 916, 262, 229, 230, 297, 300, 15247]);

/** True when SQL Server answered and refused (a login or a permission), rather than not answering. */
export function isPermissionError(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  const number = (error as { number?: unknown }).number;
  if (typeof number === 'number' && MSSQL_PERMISSION_ERRORS.has(number)) return true;
  // tedious reports a refused login as a ConnectionError (ELOGIN) carrying the server's message only.
  const { code, message } = error as { code?: unknown; message?: unknown };
  return code === 'ELOGIN' && typeof message === 'string' && /Login failed|Cannot open database|permission/i.test(message);
}

/** The error an operator should see when opening the database failed. */
function openError(error: unknown, s: MssqlSettings, database: string): Error {
  if (isPermissionError(error)) {
    const reason = error instanceof Error ? error.message : String(error);
    return new DatabasePermissionError(
      `SQL Server at ${mssqlAddress(s)} refused access to database "${database}": ${reason} ` +
        '(a missing database is created only with DATABASE_CREATE=true or npm run db:create)',
      { cause: error },
    );
  }
  return new DatabaseUnavailableError(`cannot reach SQL Server at ${mssqlAddress(s)}`, { cause: error });
}

function runOnce(connection: tedious.Connection, text: string, parameters: [string, string][] = []): Promise<Record<string, unknown>[]> {
  return new Promise((resolve, reject) => {
    const rows: Record<string, unknown>[] = [];
    const request = new tedious.Request(text, (error) => (error ? reject(error) : resolve(rows)));
    for (const [name, value] of parameters) request.addParameter(name, tedious.TYPES.NVarChar, value);
    request.on('row', (columns: { metadata: { colName: string }; value: unknown }[]) => {
      rows.push(Object.fromEntries(columns.map((c) => [c.metadata.colName, c.value])));
    });
    connection.execSql(request);
  });
}

/** Creates the database when it is missing (DATABASE_CREATE=true, or npm run db:create). */
export async function ensureMssqlDatabase(s: MssqlSettings, timeouts: TediousTimeouts): Promise<void> {
  let connection: tedious.Connection;
  try {
    connection = await connectOnce(tediousConfig(s, 'master', timeouts));
  } catch (error) {
    throw openError(error, s, 'master');
  }
  try {
    await runOnce(connection, ENSURE_DATABASE_SQL, [['name', s.database]]);
  } catch (error) {
    throw isPermissionError(error) ? openError(error, s, s.database) : error;
  } finally {
    connection.close();
  }
}

/**
 * Connects to the service's own database once before the pool does, so a refused login or a missing
 * database is reported as what it is, and says whether READ_COMMITTED_SNAPSHOT is on.
 */
async function probeMssqlDatabase(s: MssqlSettings, timeouts: TediousTimeouts): Promise<boolean> {
  let connection: tedious.Connection;
  try {
    connection = await connectOnce(tediousConfig(s, s.database, timeouts));
  } catch (error) {
    throw openError(error, s, s.database);
  }
  try {
    const [row] = await runOnce(connection, READ_COMMITTED_SNAPSHOT_SQL);
    return row?.rcsi === 1;
  } catch (error) {
    throw isPermissionError(error) ? openError(error, s, s.database) : error;
  } finally {
    connection.close();
  }
}

/** How to turn READ_COMMITTED_SNAPSHOT on for an existing database (needs a moment with no other sessions). */
export function readCommittedSnapshotAdvice(database: string): string {
  return (
    `SQL Server database "${database}" has READ_COMMITTED_SNAPSHOT off: reads wait behind in-flight commands ` +
    `and may time out (503 database-busy). Turn it on: ALTER DATABASE [${database}] SET READ_COMMITTED_SNAPSHOT ON WITH ROLLBACK IMMEDIATE`
  );
}

function mssqlTimeouts(options: DatabaseOptions): TediousTimeouts {
  const connectTimeoutMs = options.connectTimeoutMs ?? 15_000;
  return { connectTimeoutMs, requestTimeoutMs: connectTimeoutMs + REQUEST_TIMEOUT_MARGIN_MS };
}

/**
 * The plugins of a SQL Server Kysely instance of this schema, so that its results read as PostgreSQL's
 * do: JSON columns parsed (ParseJsonColumnsPlugin; uniqueidentifiers are lower-cased by tedious, see
 * tediousConfig).
 */
export function mssqlResultPlugins(): KyselyPlugin[] {
  return [new ParseJsonColumnsPlugin(JSON_COLUMNS)];
}

export async function openMssql(url: string, options: DatabaseOptions): Promise<DatabaseHandle> {
  const settings = parseMssqlUrl(url);
  const timeouts = mssqlTimeouts(options);
  if (options.createDatabase === true) await ensureMssqlDatabase(settings, timeouts);
  const readsCommittedVersions = await probeMssqlDatabase(settings, timeouts);
  if (!readsCommittedVersions) options.onWarning?.(readCommittedSnapshotAdvice(settings.database));
  const db = new Kysely<Database>({ dialect: mssqlDialect(settings, options), plugins: mssqlResultPlugins() });
  return { db, kind: 'mssql', poolStats: () => undefined, close: () => db.destroy() };
}

/** `npm run db:create`: creates the SQL Server database a URL names, when missing. */
export async function createMssqlDatabase(url: string, options: { connectTimeoutMs?: number } = {}): Promise<void> {
  await ensureMssqlDatabase(parseMssqlUrl(url), mssqlTimeouts({ lockTimeoutMs: 0, ...options }));
}
