import { mkdirSync } from 'node:fs';
import { PGlite } from '@electric-sql/pglite';
import { Kysely, MssqlDialect, PGliteDialect, PostgresDialect } from 'kysely';
import pg from 'pg';
import * as tarn from 'tarn';
import * as tedious from 'tedious';
import type { Database } from './database.js';

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

function openPglite(location: string): DatabaseHandle {
  let dataDir: string | undefined;
  if (location !== 'memory' && location !== '') {
    mkdirSync(location, { recursive: true });
    dataDir = location;
  }
  // PGlite is one connection: Kysely serialises every transaction on it, so there is no lock to wait for.
  const pglite = new PGlite(dataDir);
  const db = new Kysely<Database>({ dialect: new PGliteDialect({ pglite }) });
  return { db, kind: 'pglite', poolStats: () => undefined, close: () => db.destroy() };
}

function openPostgres(url: string, options: DatabaseOptions): DatabaseHandle {
  const pool = new pg.Pool({
    connectionString: url,
    max: options.poolMax ?? 10,
    connectionTimeoutMillis: options.connectTimeoutMs ?? 5000,
    // lock_timeout as a startup parameter: every claim is bounded without an extra round trip.
    options: `-c lock_timeout=${Math.trunc(options.lockTimeoutMs)}`,
    application_name: 'bookstore-inventory',
  });
  // Without a listener, an idle connection dropped by the server would crash the process.
  pool.on('error', (error) => options.onPoolError?.(error));
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  return {
    db,
    kind: 'postgres',
    poolStats: () => ({ total: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount }),
    close: () => db.destroy(),
  };
}

interface MssqlSettings {
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
  const u = new URL(url.replace(/^sqlserver:/, 'mssql:'));
  const database = decodeURIComponent(u.pathname.replace(/^\//, ''));
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
    user: decodeURIComponent(u.username),
    password: decodeURIComponent(u.password),
    encrypt: flag('encrypt', true),
    trustServerCertificate: flag('trustServerCertificate', false),
    instanceName: u.searchParams.get('instanceName') ?? undefined,
  };
}

function tediousConfig(s: MssqlSettings, database: string, connectTimeoutMs: number): tedious.ConnectionConfiguration {
  return {
    server: s.server,
    authentication: { type: 'default', options: { userName: s.user, password: s.password } },
    options: {
      database,
      ...(s.instanceName === undefined ? { port: s.port } : { instanceName: s.instanceName }),
      encrypt: s.encrypt,
      trustServerCertificate: s.trustServerCertificate,
      connectTimeout: connectTimeoutMs,
      // Every claim waits at most lockTimeout for a row lock; the request timeout is a backstop above it.
      requestTimeout: 0,
      useUTC: true,
    },
  };
}

function connectOnce(config: tedious.ConnectionConfiguration): Promise<tedious.Connection> {
  return new Promise((resolve, reject) => {
    const connection = new tedious.Connection(config);
    connection.connect((error) => (error ? reject(error) : resolve(connection)));
  });
}

/** Creates the database on first start, so `docker compose up` needs no manual step. */
async function ensureMssqlDatabase(s: MssqlSettings, connectTimeoutMs: number): Promise<void> {
  let connection: tedious.Connection;
  try {
    connection = await connectOnce(tediousConfig(s, 'master', connectTimeoutMs));
  } catch (error) {
    throw new DatabaseUnavailableError(`cannot reach SQL Server at ${s.server}:${s.port}`, { cause: error });
  }
  try {
    await new Promise<void>((resolve, reject) => {
      const request = new tedious.Request(
        `IF DB_ID(@name) IS NULL EXEC('CREATE DATABASE ' + QUOTENAME(@name))`,
        (error) => (error ? reject(error) : resolve()),
      );
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
  await ensureMssqlDatabase(settings, connectTimeoutMs);
  const db = new Kysely<Database>({
    dialect: new MssqlDialect({
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
        connectionFactory: () => new tedious.Connection(tediousConfig(settings, settings.database, connectTimeoutMs)),
      },
    }),
  });
  return { db, kind: 'mssql', poolStats: () => undefined, close: () => db.destroy() };
}
