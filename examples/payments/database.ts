import { mkdirSync } from 'node:fs';
import { PGlite } from '@electric-sql/pglite';
import { CompiledQuery, Kysely, MysqlDialect, PGliteDialect, PostgresDialect } from 'kysely';
import { createPool } from 'mysql2';
import pg from 'pg';
import type { Database } from './schema.js';

export interface PaymentsDatabase {
  readonly db: Kysely<Database>;
  readonly kind: 'pglite' | 'postgres' | 'mysql';
}

/**
 * PostgreSQL at a `postgres://` URL, MariaDB or MySQL at a `mysql://` or `mariadb://` one, or embedded
 * PGlite (in memory, or in `pgliteDir`) without one. Every connection bounds its lock waits: a copy whose
 * claim meets another copy's uncommitted claim waits at most this long, then the inbox answers 409
 * in-flight. PGlite runs one transaction at a time, so nothing ever waits on a lock there.
 */
export function openDatabase(url: string | undefined, options: { lockTimeoutMs: number; pgliteDir?: string }): PaymentsDatabase {
  if (url === undefined || url === '') {
    if (options.pgliteDir !== undefined) mkdirSync(options.pgliteDir, { recursive: true });
    return { db: new Kysely<Database>({ dialect: new PGliteDialect({ pglite: new PGlite(options.pgliteDir) }) }), kind: 'pglite' };
  }
  if (/^(mysql|mariadb):/.test(url)) return { db: openMysql(url, options.lockTimeoutMs), kind: 'mysql' };
  const pool = new pg.Pool({ connectionString: url, max: 10, options: `-c lock_timeout=${Math.trunc(options.lockTimeoutMs)}` });
  // An idle connection the server dropped is discarded by the pool; without a listener its error would end the process.
  pool.on('error', () => {});
  return { db: new Kysely<Database>({ dialect: new PostgresDialect({ pool }) }), kind: 'postgres' };
}

/**
 * MariaDB or MySQL through a mysql2 pool. Each connection, before its first statement:
 * - READ COMMITTED: InnoDB's default REPEATABLE READ takes gap locks, and two claims of neighbouring
 *   inbox keys would then wait on (or deadlock with) each other;
 * - time_zone UTC: timestamps are stored and read as instants, as timestamptz is on PostgreSQL;
 * - innodb_lock_wait_timeout: InnoDB counts lock waits in whole seconds, so the bound is rounded up.
 */
function openMysql(url: string, lockTimeoutMs: number): Kysely<Database> {
  const u = new URL(url.replace(/^mariadb:/, 'mysql:'));
  const pool = createPool({
    host: u.hostname,
    port: u.port === '' ? 3306 : Number(u.port),
    user: decodeURIComponent(u.username) || 'root',
    password: decodeURIComponent(u.password),
    database: decodeURIComponent(u.pathname.slice(1)),
    connectionLimit: 10,
    charset: 'UTF8MB4_BIN',
    timezone: 'Z',
  });
  // Without a listener, an error on an idle pooled connection would end the process.
  pool.on('connection', (connection) => connection.on('error', () => {}));
  const lockWaitSeconds = Math.max(1, Math.ceil(lockTimeoutMs / 1000));
  return new Kysely<Database>({
    dialect: new MysqlDialect({
      pool,
      onCreateConnection: async (connection) => {
        await connection.executeQuery(CompiledQuery.raw('SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED'));
        await connection.executeQuery(CompiledQuery.raw(`SET SESSION time_zone = '+00:00', innodb_lock_wait_timeout = ${lockWaitSeconds}`));
      },
    }),
  });
}
