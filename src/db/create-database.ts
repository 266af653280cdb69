import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
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
  /** Start-up (migrations) is over: the embedded database optimises its hot code from now on (pglite.ts). */
  startupDone?(): void;
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
  /**
   * SQL Server: create the database (READ_COMMITTED_SNAPSHOT on) when it is missing. Needs a login that
   * may connect to master and CREATE DATABASE; off by default, so a least-privileged user never tries.
   */
  createDatabase?: boolean;
  /** Told about settings that work but will hurt (SQL Server without READ_COMMITTED_SNAPSHOT). */
  onWarning?: (message: string) => void;
}

export class DatabaseUrlError extends Error {
  override readonly name = 'DatabaseUrlError';
}

export class DatabaseUnavailableError extends Error {
  override readonly name = 'DatabaseUnavailableError';
}

/** The server answered, and refused: a login, a database it may not open, a permission it lacks. */
export class DatabasePermissionError extends Error {
  override readonly name = 'DatabasePermissionError';
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
      // Loaded on demand: tedious and the SQL Server dialect are only needed for SQL Server.
      return (await import('./mssql.js')).openMssql(url, options);
  }
}

async function openPglite(location: string): Promise<DatabaseHandle> {
  // Loaded on demand: the WebAssembly build of PostgreSQL is only needed for the embedded database.
  const { openPglite: open } = await import('./pglite.js');
  const { db, startupDone, close } = await open(location);
  return { db, kind: 'pglite', poolStats: () => undefined, startupDone, close };
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
