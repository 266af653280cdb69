import { Kysely, MssqlAdapter, MssqlDialect, PostgresDialect, sql, type DialectAdapter, type MigrationLockOptions } from 'kysely';
import { DEFAULT_MIGRATION_TABLE } from 'kysely/migration';
import pg from 'pg';
import * as tarn from 'tarn';
import * as tedious from 'tedious';
import type { Database } from './database.js';
import { PreparingClient } from './prepared-statements.js';

export type DatabaseKind = 'pglite' | 'postgres' | 'mssql';

export interface PoolStats {
  total: number;
  idle: number;
  waiting: number;
}

export interface DatabaseHandle {
  readonly db: Kysely<Database>;
  readonly kind: DatabaseKind;
  /** Pool figures where the driver exposes them (pg); undefined otherwise. */
  poolStats(): PoolStats | undefined;
  close(): Promise<void>;
}

export interface DatabaseOptions {
  /** How long a statement waits for a row lock before failing (the in-flight bound). */
  lockTimeoutMs: number;
  /** Largest number of pooled connections (server databases). */
  poolMax?: number;
  /** Bound on connecting and on waiting for a pooled connection. */
  connectTimeoutMs?: number;
  /** Called when an idle pooled connection fails (a server restart, a killed backend). */
  onPoolError?: (error: Error) => void;
}

export class DatabaseUrlError extends Error {
  override readonly name = 'DatabaseUrlError';
}

export class DatabaseUnavailableError extends Error {
  override readonly name = 'DatabaseUnavailableError';
}

/** The engine a DATABASE_URL names. */
export function databaseKind(url: string): DatabaseKind {
  if (url.startsWith('pglite:')) return 'pglite';
  if (/^postgres(ql)?:\/\//.test(url)) return 'postgres';
  if (/^(mssql|sqlserver):\/\//.test(url)) return 'mssql';
  throw new DatabaseUrlError('unsupported database URL scheme');
}

/** Opens a database by URL: `pglite:memory`, `pglite:<dir>`, `postgres://…`, `mssql://…`/`sqlserver://…`. */
export async function createDatabase(url: string, options: DatabaseOptions): Promise<DatabaseHandle> {
  switch (databaseKind(url)) {
    case 'pglite':
      return openPglite(url.slice('pglite:'.length));
    case 'postgres':
      return openPostgres(url, options);
    case 'mssql':
      return openMssql(url, options);
  }
}

async function openPglite(location: string): Promise<DatabaseHandle> {
  // Loaded on demand: the WebAssembly build of PostgreSQL is only needed for the embedded database.
  const { openPglite: open } = await import('./pglite.js');
  const { db, close } = await open(location);
  return { db, kind: 'pglite', poolStats: () => undefined, close };
}

function openPostgres(url: string, options: DatabaseOptions): DatabaseHandle {
  const pool = new pg.Pool({
    connectionString: url,
    max: options.poolMax ?? 10,
    connectionTimeoutMillis: options.connectTimeoutMs ?? 5000,
    // lock_timeout as a startup parameter: every claim is bounded without an extra round trip.
    options: `-c lock_timeout=${Math.trunc(options.lockTimeoutMs)}`,
    application_name: 'bookstore-inventory',
    // Named prepared statements: each connection parses and plans a query shape once.
    Client: PreparingClient,
  });
  // Without a listener, an idle connection dropped by the server would crash the process.
  pool.on('error', (error) => options.onPoolError?.(error));
  // pg-pool listens for errors only while a client is idle. A client checked out by a transaction
  // whose connection drops between two statements (pg_terminate_backend, a server restart) emits
  // 'error' with nobody listening, and the process would die. The failure still reaches the
  // transaction: its next statement fails as not queryable, and the pool discards the client on release.
  pool.on('connect', (client) => client.on('error', () => {}));
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  return {
    db,
    kind: 'postgres',
    poolStats: () => ({ total: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount }),
    close: () => db.destroy(),
  };
}

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
  if (!/^[A-Za-z0-9_-]{1,100}$/.test(database)) throw new DatabaseUrlError('the SQL Server database name may use letters, digits, _ and - only');
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
 * A tedious connection that bounds lock waits for its whole session.
 * The SET must travel as a plain SQL batch: Kysely sends every statement through sp_executesql, and
 * SQL Server restores a SET option when the dynamic batch that set it returns, so a SET LOCK_TIMEOUT
 * sent through Kysely bounds nothing after itself.
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
        new tedious.Request(lockTimeoutStatement(this.#lockTimeoutMs), (setError) => {
          // The pool never sees a connection that failed to connect, so it cannot close it: close it here.
          if (setError) this.close();
          connectListener?.(setError ?? undefined);
        }),
      );
    });
  }
}

/**
 * Kysely's migration lock is sp_getapplock, which waits only @@LOCK_TIMEOUT by default (bounded on
 * these sessions) and reports a timeout as a return code that Kysely ignores: a second replica would
 * then migrate without the lock. Wait for it without a bound (the request timeout still applies) and
 * fail loudly when it is refused.
 */
class MssqlServiceAdapter extends MssqlAdapter {
  override async acquireMigrationLock(db: Kysely<any>, _options: MigrationLockOptions): Promise<void> {
    await sql`DECLARE @result int;
EXEC @result = sp_getapplock @DbPrincipal = ${sql.lit('dbo')}, @Resource = ${sql.lit(DEFAULT_MIGRATION_TABLE)}, @LockMode = ${sql.lit('Exclusive')}, @LockOwner = ${sql.lit('Session')}, @LockTimeout = -1;
IF @result < 0 RAISERROR('the migration lock was not granted (sp_getapplock returned %d)', 16, 1, @result);`.execute(db);
  }
}

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
      connectionFactory: () =>
        new LockBoundedConnection(tediousConfig(settings, settings.database, timeouts), options.lockTimeoutMs),
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
 * Creates the database when it is missing. EXEC() accepts only string literals and variables, not a
 * function call such as QUOTENAME(), so the statement is built in a variable first. Two replicas
 * starting at once may both see it missing: the loser's "already exists" (1801) is not an error.
 */
export const ENSURE_DATABASE_SQL = `IF DB_ID(@name) IS NULL
BEGIN
  DECLARE @create nvarchar(300) = N'CREATE DATABASE ' + QUOTENAME(@name);
  BEGIN TRY
    EXEC (@create);
  END TRY
  BEGIN CATCH
    IF ERROR_NUMBER() <> 1801 OR DB_ID(@name) IS NULL THROW;
  END CATCH
END`;

/** Creates the database on first start, so `docker compose up` needs no manual step. */
async function ensureMssqlDatabase(s: MssqlSettings, timeouts: TediousTimeouts): Promise<void> {
  let connection: tedious.Connection;
  try {
    connection = await connectOnce(tediousConfig(s, 'master', timeouts));
  } catch (error) {
    throw new DatabaseUnavailableError(`cannot reach SQL Server at ${mssqlAddress(s)}`, { cause: error });
  }
  try {
    await new Promise<void>((resolve, reject) => {
      const request = new tedious.Request(ENSURE_DATABASE_SQL, (error) => (error ? reject(error) : resolve()));
      request.addParameter('name', tedious.TYPES.NVarChar, s.database);
      connection.execSql(request);
    });
  } finally {
    connection.close();
  }
}

async function openMssql(url: string, options: DatabaseOptions): Promise<DatabaseHandle> {
  const settings = parseMssqlUrl(url);
  const connectTimeoutMs = options.connectTimeoutMs ?? 15_000;
  await ensureMssqlDatabase(settings, { connectTimeoutMs, requestTimeoutMs: connectTimeoutMs + REQUEST_TIMEOUT_MARGIN_MS });
  const db = new Kysely<Database>({ dialect: mssqlDialect(settings, options) });
  return { db, kind: 'mssql', poolStats: () => undefined, close: () => db.destroy() };
}
