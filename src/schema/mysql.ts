import { CompiledQuery, Kysely, MysqlDialect, type DatabaseConnection } from 'kysely';
import type { MysqlPool, MysqlPoolConnection } from 'kysely';
import { createPool, type Pool, type PoolOptions, type RowDataPacket } from 'mysql2';
import { DatabaseUrlError, type DatabaseHandle, type DatabaseOptions, type PoolStats } from './handle.js';
import { JSON_COLUMNS, type Database } from './database.js';
import { MariadbDialect, MYSQL_POOL_ACQUIRE_TIMEOUT, ParseJsonColumnsPlugin } from '../db/dialect.js';

/**
 * MariaDB and MySQL through mysql2: URL parsing, session settings, the pool, database creation. Loaded
 * only when a `mysql://` or `mariadb://` URL is used (create-database.ts imports it on demand).
 */

/** Where and how to reach MariaDB or MySQL, as parsed from a `mysql://` or `mariadb://` URL. */
export interface MysqlSettings {
  host: string;
  port: number;
  database: string;
  user: string;
  password: string;
  /** A Unix socket to connect through instead of host and port (`?socketPath=`). */
  socketPath: string | undefined;
}

/** Parses `mysql://user:password@host:3306/database` (or `mariadb://…`), `?socketPath=/run/mysqld/mysqld.sock` optional. */
export function parseMysqlUrl(url: string): MysqlSettings {
  let u: URL;
  let database: string;
  let user: string;
  let password: string;
  try {
    u = new URL(url.replace(/^mariadb:/, 'mysql:'));
    database = decodeURIComponent(u.pathname.replace(/^\//, ''));
    user = decodeURIComponent(u.username);
    password = decodeURIComponent(u.password);
  } catch {
    // No cause attached: URL's TypeError carries the input, and the input carries the password.
    throw new DatabaseUrlError('the MySQL URL is malformed (percent-encode reserved characters in the password)');
  }
  if (u.hostname === '') throw new DatabaseUrlError('the MySQL URL must name a host: mysql://user:pass@host:3306/bookstore');
  if (database === '') throw new DatabaseUrlError('the MySQL URL must name a database: mysql://user:pass@host:3306/bookstore');
  // The name is written into CREATE DATABASE by db:create: keep it to characters that need no quoting rules.
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(database)) throw new DatabaseUrlError('the MySQL database name may use letters, digits, _ and - only');
  return {
    host: u.hostname,
    port: u.port === '' ? 3306 : Number(u.port),
    database,
    user: user === '' ? 'root' : user,
    password,
    socketPath: u.searchParams.get('socketPath') ?? undefined,
  };
}

/**
 * InnoDB bounds lock waits in whole seconds: INBOX_LOCK_TIMEOUT_MS is rounded up to the next second
 * on MariaDB and MySQL, and is at least one second (0 would not mean "fail at once" there).
 */
export function lockWaitTimeoutSeconds(lockTimeoutMs: number): number {
  return Math.max(1, Math.ceil(lockTimeoutMs / 1000));
}

/** The strict SQL mode: a value that does not fit fails instead of being truncated or zeroed. */
export const MYSQL_SQL_MODE = 'STRICT_TRANS_TABLES,NO_ZERO_DATE,NO_ZERO_IN_DATE,ERROR_FOR_DIVISION_BY_ZERO';

/**
 * The settings every pooled session makes before its first statement, whatever the server's defaults:
 * - READ COMMITTED: InnoDB's default REPEATABLE READ takes gap locks on the inbox's key range, and
 *   two batches inserting neighbouring keys then deadlock each other. (SET SESSION TRANSACTION is
 *   understood by MariaDB 10.x, which has no transaction_isolation variable, and by MySQL.)
 * - time_zone UTC: timestamps are stored and compared as instants, as on PostgreSQL.
 * - strict sql_mode, and the binary utf8mb4 collation so keys compare byte for byte, as on PostgreSQL.
 * - innodb_lock_wait_timeout: the in-flight bound on every lock wait (lockWaitTimeoutSeconds).
 */
export function sessionSettingsStatements(lockTimeoutMs: number): string[] {
  return [
    'SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED',
    `SET SESSION time_zone = '+00:00', sql_mode = '${MYSQL_SQL_MODE}', innodb_lock_wait_timeout = ${lockWaitTimeoutSeconds(lockTimeoutMs)}, ` +
      `collation_connection = 'utf8mb4_bin'`,
  ];
}

/** The mysql2 pool options for the settings and the service's bounds. */
export function mysqlPoolOptions(settings: MysqlSettings, options: Pick<DatabaseOptions, 'poolMax' | 'connectTimeoutMs'>): PoolOptions {
  return {
    ...(settings.socketPath === undefined ? { host: settings.host, port: settings.port } : { socketPath: settings.socketPath }),
    user: settings.user,
    password: settings.password,
    database: settings.database,
    connectionLimit: options.poolMax ?? 10,
    // Waiting is bounded by time (BoundedPool), as on PostgreSQL, not by the queue's length.
    waitForConnections: true,
    queueLimit: 0,
    connectTimeout: options.connectTimeoutMs ?? 5000,
    charset: 'UTF8MB4_BIN',
    // Dates cross as UTC instants and are read back as Date objects, as pg does.
    timezone: 'Z',
    dateStrings: false,
    // bigint (the outbox's seq) reads back as a string, as pg returns int8.
    supportBigNumbers: true,
    bigNumberStrings: true,
  };
}

/** No pooled connection came free in time: every one is busy (mysqlFailureKind: 'busy'). */
export class MysqlPoolBusyError extends Error {
  override readonly name = 'MysqlPoolBusyError';
  readonly code = MYSQL_POOL_ACQUIRE_TIMEOUT;
}

/**
 * mysql2's pool waits for a free connection without a bound. This one gives up after acquireTimeoutMs
 * (as pg-pool's connectionTimeoutMillis does), and returns a connection that comes free too late.
 */
class BoundedPool implements MysqlPool {
  constructor(
    readonly pool: Pool,
    private readonly acquireTimeoutMs: number,
  ) {}

  getConnection(callback: (error: unknown, connection: MysqlPoolConnection) => void): void {
    let done = false;
    const timer = setTimeout(() => {
      done = true;
      callback(new MysqlPoolBusyError(`no pooled MySQL connection came free within ${this.acquireTimeoutMs} ms`), undefined as never);
    }, this.acquireTimeoutMs);
    this.pool.getConnection((error, connection) => {
      if (done) {
        connection?.release();
        return;
      }
      done = true;
      clearTimeout(timer);
      callback(error, connection);
    });
  }

  end(callback: (error: unknown) => void): void {
    this.pool.end(callback);
  }
}

/** Pool figures from mysql2's pool (its queues are not part of its typed API). */
function mysqlPoolStats(pool: Pool): PoolStats | undefined {
  const queues = pool as unknown as {
    _allConnections?: { length: number };
    _freeConnections?: { length: number };
    _connectionQueue?: { length: number };
  };
  if (queues._allConnections === undefined || queues._freeConnections === undefined || queues._connectionQueue === undefined)
    return undefined;
  return { total: queues._allConnections.length, idle: queues._freeConnections.length, waiting: queues._connectionQueue.length };
}

async function applySessionSettings(connection: DatabaseConnection, lockTimeoutMs: number): Promise<void> {
  for (const statement of sessionSettingsStatements(lockTimeoutMs)) await connection.executeQuery(CompiledQuery.raw(statement));
}

/** True when a server's `SELECT VERSION()` names MariaDB (`10.11.6-MariaDB-0+deb12u1`); MySQL's does not (`8.0.36`). */
export function isMariadbVersion(version: string): boolean {
  return /mariadb/i.test(version);
}

/**
 * The server's version, asked once through the pool: the connection it opens stays pooled, and gets
 * the session settings when Kysely first takes it.
 */
async function serverVersion(pool: Pool): Promise<string> {
  const [rows] = await pool.promise().query<RowDataPacket[]>('SELECT VERSION() AS version');
  return String(rows[0]?.['version'] ?? '');
}

/**
 * Opens a MariaDB or MySQL database by URL: a Kysely dialect over a mysql2 pool. The server's version
 * is asked at open: on MariaDB the dialect is MariadbDialect, which the engine layer reports as
 * `mariadb` (OpenTelemetry's db.system.name), on MySQL Kysely's MysqlDialect (`mysql`); the SQL is the same.
 */
export async function openMysql(url: string, options: DatabaseOptions): Promise<DatabaseHandle> {
  const settings = parseMysqlUrl(url);
  const pool = createPool(mysqlPoolOptions(settings, options));
  // Without a listener, an error on an idle pooled connection would crash the process.
  pool.on('connection', (connection) => connection.on('error', (error: Error) => options.onPoolError?.(error)));
  let mariadb: boolean;
  try {
    mariadb = isMariadbVersion(await serverVersion(pool));
  } catch (error) {
    await pool
      .promise()
      .end()
      .catch(() => {});
    throw error;
  }
  const config = {
    pool: new BoundedPool(pool, options.connectTimeoutMs ?? 5000),
    onCreateConnection: (connection: DatabaseConnection) => applySessionSettings(connection, options.lockTimeoutMs),
  };
  const db = new Kysely<Database>({
    dialect: mariadb ? new MariadbDialect(config) : new MysqlDialect(config),
    // MariaDB's JSON is text, read back as a string; MySQL's arrives parsed, and is left as it is.
    plugins: [new ParseJsonColumnsPlugin(JSON_COLUMNS)],
  });
  return { db, kind: 'mysql', poolStats: () => mysqlPoolStats(pool), close: () => db.destroy() };
}

/** The statement `npm run db:create` runs: the database in utf8mb4 with binary (byte-exact) comparison. */
export function createDatabaseStatement(database: string): string {
  return `CREATE DATABASE IF NOT EXISTS \`${database}\` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin`;
}

/** `npm run db:create`: creates the MariaDB or MySQL database a URL names, when missing. */
export async function createMysqlDatabase(url: string, options: { connectTimeoutMs?: number } = {}): Promise<void> {
  const settings = parseMysqlUrl(url);
  // Connected to no database: the one named may not exist yet.
  const pool = createPool({ ...mysqlPoolOptions(settings, { poolMax: 1, ...options }), database: undefined }).promise();
  try {
    await pool.query(createDatabaseStatement(settings.database));
  } finally {
    await pool.end();
  }
}
