import type { Kysely } from 'kysely';
import type { Database } from './database.js';

/**
 * What every database opener returns and takes, and the errors opening a database reports: shared by
 * create-database.ts and the openers it loads on demand (mssql.ts, mysql.ts, pglite.ts), which import only this.
 */

export type DatabaseKind = 'pglite' | 'postgres' | 'mssql' | 'mysql';

export interface PoolStats {
  total: number;
  idle: number;
  waiting: number;
}

export interface DatabaseHandle {
  readonly db: Kysely<Database>;
  readonly kind: DatabaseKind;
  /**
   * Most transactions worth running at once; undefined when only the pool bounds them. PGlite is one
   * connection that runs one transaction at a time: more in flight would only queue behind it.
   */
  readonly maxConcurrentTransactions?: number;
  /** Pool figures where the driver exposes them (pg, mysql2); undefined otherwise. */
  poolStats(): PoolStats | undefined;
  /** Start-up is over (migrated, every plugin and route loaded): the embedded database optimises its hot code from now on (pglite.ts). */
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
