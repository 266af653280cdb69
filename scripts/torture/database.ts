/**
 * The database a run works on, whatever its engine: create and drop the run's database, end the service's
 * connections to it (a fault), and the rows the checks read. PostgreSQL (postgres.ts) or MariaDB/MySQL
 * (mysql.ts), chosen by the URL's scheme.
 */
import type { ThrowawayServer } from './processes.js';

export type Engine = 'postgres' | 'mysql';

/** The engine a database URL names: `mysql://` and `mariadb://` are MariaDB/MySQL, anything else PostgreSQL. */
export function engineOf(url: string): Engine {
  return /^(mysql|mariadb):/.test(url) ? 'mysql' : 'postgres';
}

export interface RunDatabase {
  name: string;
  url: string;
}

export interface ReservationRow {
  order_id: string;
  book_id: string;
  quantity: number;
  reserved_by: string;
  released_by: string | null;
  released_at: Date | null;
}

export interface StockRow {
  book_id: string;
  on_hand: number;
  reserved: number;
}

export interface InboxRow {
  message_id: string;
  consumer: string;
  completed_at: Date | null;
  /** The recorded outcome, parsed (MariaDB hands a JSON column over as text). */
  outcome: unknown;
}

/** The rows the checks read, on one connection of the run's database. */
export interface Rows {
  reservations(): Promise<ReservationRow[]>;
  stock(): Promise<StockRow[]>;
  inbox(): Promise<InboxRow[]>;
  /** The number of rows in `from`: a table, optionally with a where clause (`outbox where published_at is null`). */
  count(from: string): Promise<number>;
}

/** The server a run makes its database on. */
export interface DatabaseServer {
  readonly engine: Engine;
  /** The URL given (or an own cluster's): where databases are created; never printed with a password. */
  readonly adminUrl: string;
  /** Set when this run owns the server (a throwaway PostgreSQL cluster) and may restart it. */
  readonly server: ThrowawayServer | undefined;
  /** Creates a database of a new name starting with `prefix`. */
  createDatabase(prefix: string): Promise<RunDatabase>;
  /** Drops the run's database (an own cluster is deleted whole at the end instead); a failure is only said. */
  dropDatabase(database: RunDatabase): Promise<void>;
  /**
   * Ends the service's connections to `database`, those `choose` picks of the ids found (PostgreSQL:
   * pg_terminate_backend; MariaDB: KILL CONNECTION); returns how many were ended.
   */
  killServiceConnections(database: RunDatabase, choose: (ids: number[]) => number[]): Promise<number>;
  /** What the fault is called in the log and the summary. */
  readonly connectionKillName: string;
}

/** Runs `fn` with the rows of the database at `url`, on a connection of its own. */
export async function withRows<T>(url: string, fn: (rows: Rows) => Promise<T>): Promise<T> {
  if (engineOf(url) === 'mysql') return (await import('./mysql.js')).withMysqlRows(url, fn);
  return (await import('./postgres.js')).withPostgresRows(url, fn);
}

/** The server at `givenUrl`, or without one a throwaway PostgreSQL cluster of this run's own. */
export async function openServer(givenUrl: string | undefined, keep: boolean): Promise<DatabaseServer> {
  if (givenUrl !== undefined && engineOf(givenUrl) === 'mysql') return (await import('./mysql.js')).mysqlServer(givenUrl);
  const postgres = await import('./postgres.js');
  return postgres.postgresServer(await postgres.openCluster(givenUrl, keep));
}

/** The database URL a run was given: --database-url, else TORTURE_DATABASE_URL, else TORTURE_POSTGRES_URL. */
export function givenDatabaseUrl(): string | undefined {
  const i = process.argv.indexOf('--database-url');
  const url = (i >= 0 ? process.argv[i + 1] : undefined) ?? process.env.TORTURE_DATABASE_URL ?? process.env.TORTURE_POSTGRES_URL;
  return url === '' ? undefined : url;
}

/** Per book, the quantity its live (unreleased) reservations hold. */
export function liveReservedByBook(reservations: readonly ReservationRow[]): Map<string, number> {
  const sums = new Map<string, number>();
  for (const r of reservations) if (r.released_at === null) sums.set(r.book_id, (sums.get(r.book_id) ?? 0) + r.quantity);
  return sums;
}
