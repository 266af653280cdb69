import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import type { Database } from './database.js';
import { DatabaseUrlError, type DatabaseHandle, type DatabaseKind, type DatabaseOptions } from './handle.js';
import { PreparingClient } from '../db/prepared-statements.js';

export {
  DatabasePermissionError,
  DatabaseUnavailableError,
  DatabaseUrlError,
  type DatabaseHandle,
  type DatabaseKind,
  type DatabaseOptions,
  type PoolStats,
} from './handle.js';

/** The engine a DATABASE_URL names. */
export function databaseKind(url: string): DatabaseKind {
  if (url.startsWith('pglite:')) return 'pglite';
  if (/^postgres(ql)?:\/\//.test(url)) return 'postgres';
  if (/^(mssql|sqlserver):\/\//.test(url)) return 'mssql';
  if (/^(mysql|mariadb):\/\//.test(url)) return 'mysql';
  throw new DatabaseUrlError('unsupported database URL scheme');
}

/** Opens a database by URL: `pglite:memory`, `pglite:<dir>`, `postgres://…`, `mssql://…`/`sqlserver://…`, `mysql://…`/`mariadb://…`. */
export function createDatabase(url: string, options: DatabaseOptions): Promise<DatabaseHandle> {
  return OPENERS[databaseKind(url)](url, options);
}

/** How each kind of URL is opened; the embedded, SQL Server and MariaDB/MySQL drivers are loaded only for their own URLs. */
const OPENERS: Readonly<Record<DatabaseKind, (url: string, options: DatabaseOptions) => Promise<DatabaseHandle>>> = {
  pglite: (url) => openPglite(url.slice('pglite:'.length)),
  postgres: (url, options) => Promise.resolve(openPostgres(url, options)),
  // Loaded on demand: tedious and the SQL Server dialect are only needed for SQL Server.
  mssql: async (url, options) => (await import('./mssql.js')).openMssql(url, options),
  // Loaded on demand: mysql2 is only needed for MariaDB and MySQL.
  mysql: async (url, options) => (await import('./mysql.js')).openMysql(url, options),
};

async function openPglite(location: string): Promise<DatabaseHandle> {
  // Loaded on demand: the WebAssembly build of PostgreSQL is only needed for the embedded database.
  const { openPglite: open } = await import('./pglite.js');
  const { db, startupDone, close } = await open(location);
  // One connection, one transaction at a time (pglite.ts).
  return { db, kind: 'pglite', maxConcurrentTransactions: 1, poolStats: () => undefined, startupDone, close };
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
