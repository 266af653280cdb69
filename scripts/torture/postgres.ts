/** PostgreSQL for a run: an own throwaway cluster or a given server, the run's database, and the rows the checks read. */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { describeError, say } from './log.js';
import { ThrowawayServer } from './processes.js';

export interface Cluster {
  /** Admin URL (the postgres database). */
  adminUrl: string;
  /** Set when this run owns the cluster and may restart it. */
  server: ThrowawayServer | undefined;
}

/** The server at `givenUrl` (a superuser), or without one a throwaway cluster of this run's own. */
export async function openCluster(givenUrl: string | undefined, keep: boolean): Promise<Cluster> {
  if (givenUrl !== undefined && givenUrl !== '') return { adminUrl: givenUrl, server: undefined };
  const server = new ThrowawayServer('pg-throwaway.sh', 'torture-pg-', keep);
  say(`starting a throwaway PostgreSQL cluster in ${server.dir}`);
  return { adminUrl: await server.start(), server };
}

/** Runs `fn` on a connection of its own, which a fault may end: the error then surfaces on the query. */
export async function withClient<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000, application_name: 'torture-driver' });
  // A fault may end this connection too; the error surfaces on the query, the listener keeps the process alive.
  client.on('error', () => {});
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => {});
  }
}

export interface Database {
  name: string;
  url: string;
}

/** Creates a database of a new name starting with `prefix` on the cluster. */
export async function createDatabase(cluster: Cluster, prefix: string): Promise<Database> {
  const name = `${prefix}_${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
  await withClient(cluster.adminUrl, (c) => c.query(`CREATE DATABASE ${name}`));
  const url = new URL(cluster.adminUrl);
  url.pathname = `/${name}`;
  return { name, url: url.toString() };
}

/** Drops the run's database from a given server; an own cluster is deleted whole at the end instead. */
export async function dropDatabase(cluster: Cluster, database: Database): Promise<void> {
  if (cluster.server !== undefined) return;
  await withClient(cluster.adminUrl, (c) => c.query(`DROP DATABASE IF EXISTS ${database.name} WITH (FORCE)`)).catch((error) =>
    say(`could not drop ${database.name}: ${describeError(error)}`),
  );
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

export async function readReservations(client: pg.Client): Promise<ReservationRow[]> {
  const sql = 'select order_id, book_id, quantity, reserved_by, released_by, released_at from stock_reservations';
  return (await client.query<ReservationRow>(sql)).rows;
}

export async function readStock(client: pg.Client): Promise<StockRow[]> {
  return (await client.query<StockRow>('select book_id, on_hand, reserved from stock_items')).rows;
}

/** The number of rows in `from`: a table, optionally with a where clause (`outbox where published_at is null`). */
export async function count(client: pg.Client, from: string): Promise<number> {
  return Number((await client.query<{ n: string }>(`select count(*) as n from ${from}`)).rows[0]?.n ?? 0);
}

/** Per book, the quantity its live (unreleased) reservations hold. */
export function liveReservedByBook(reservations: readonly ReservationRow[]): Map<string, number> {
  const sums = new Map<string, number>();
  for (const r of reservations) if (r.released_at === null) sums.set(r.book_id, (sums.get(r.book_id) ?? 0) + r.quantity);
  return sums;
}
