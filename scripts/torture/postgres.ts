/** PostgreSQL for a run: an own throwaway cluster or a given server, the run's database, and the rows the checks read. */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { describeError, say } from './log.js';
import type { DatabaseServer, InboxRow, ReservationRow, Rows, StockRow } from './database.js';
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

/** The rows the checks read, from a PostgreSQL client. */
export function postgresRows(client: pg.Client): Rows {
  return {
    reservations: async () =>
      (
        await client.query<ReservationRow>(
          'select order_id, book_id, quantity, reserved_by, released_by, released_at from stock_reservations',
        )
      ).rows,
    stock: async () => (await client.query<StockRow>('select book_id, on_hand, reserved from stock_items')).rows,
    inbox: async () => (await client.query<InboxRow>('select message_id, consumer, completed_at, outcome from inbox')).rows,
    count: (from) => count(client, from),
  };
}

/** Runs `fn` with the rows of the PostgreSQL database at `url`. */
export function withPostgresRows<T>(url: string, fn: (rows: Rows) => Promise<T>): Promise<T> {
  return withClient(url, (client) => fn(postgresRows(client)));
}

/** The number of rows in `from`: a table, optionally with a where clause (`outbox where published_at is null`). */
export async function count(client: pg.Client, from: string): Promise<number> {
  return Number((await client.query<{ n: string }>(`select count(*) as n from ${from}`)).rows[0]?.n ?? 0);
}

/** The service names its pool connections so; pg_terminate_backend aims at these only. */
const SERVICE_APPLICATION_NAME = 'bookstore-inventory';

/** A PostgreSQL cluster as the server of a run. */
export function postgresServer(cluster: Cluster): DatabaseServer {
  return {
    engine: 'postgres',
    adminUrl: cluster.adminUrl,
    server: cluster.server,
    connectionKillName: 'pg_terminate_backend',
    createDatabase: (prefix) => createDatabase(cluster, prefix),
    dropDatabase: (database) => dropDatabase(cluster, database),
    killServiceConnections: (database, choose) =>
      withClient(cluster.adminUrl, async (client) => {
        const { rows } = await client.query<{ pid: number }>(
          'select pid from pg_stat_activity where datname = $1 and application_name = $2 and pid <> pg_backend_pid()',
          [database.name, SERVICE_APPLICATION_NAME],
        );
        let n = 0;
        for (const pid of choose(rows.map((r) => r.pid))) {
          const res = await client.query<{ ok: boolean }>('select pg_terminate_backend($1) as ok', [pid]);
          if (res.rows[0]?.ok) n++;
        }
        return n;
      }),
  };
}
