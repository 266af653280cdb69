import { mkdirSync } from 'node:fs';
import { PGlite } from '@electric-sql/pglite';
import { Kysely, PGliteDialect, PostgresDialect } from 'kysely';
import pg from 'pg';
import type { Database } from './schema.js';

export interface PaymentsDatabase {
  readonly db: Kysely<Database>;
  readonly kind: 'pglite' | 'postgres';
}

/**
 * PostgreSQL at `url`, or embedded PGlite (in memory, or in `pgliteDir`) without one. On PostgreSQL
 * every connection bounds its lock waits (lock_timeout): a copy whose claim meets another copy's
 * uncommitted claim waits at most this long, then the inbox answers 409 in-flight. PGlite runs one
 * transaction at a time, so nothing ever waits on a lock there.
 */
export function openDatabase(url: string | undefined, options: { lockTimeoutMs: number; pgliteDir?: string }): PaymentsDatabase {
  if (url === undefined || url === '') {
    if (options.pgliteDir !== undefined) mkdirSync(options.pgliteDir, { recursive: true });
    return { db: new Kysely<Database>({ dialect: new PGliteDialect({ pglite: new PGlite(options.pgliteDir) }) }), kind: 'pglite' };
  }
  const pool = new pg.Pool({ connectionString: url, max: 10, options: `-c lock_timeout=${Math.trunc(options.lockTimeoutMs)}` });
  // An idle connection the server dropped is discarded by the pool; without a listener its error would end the process.
  pool.on('error', () => {});
  return { db: new Kysely<Database>({ dialect: new PostgresDialect({ pool }) }), kind: 'postgres' };
}
