import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { createConnection, type Connection, type RowDataPacket } from 'mysql2/promise';
import { BOOKS, bookId, ON_HAND } from './postgres.js';
import { freePort, startNode, type BenchProcess } from './processes.js';

/**
 * `npm run bench -- --database mysql`: the service's database and its checks on MariaDB/MySQL, the
 * server's CPU, and the hand-rolled mysql2 peer (bench/peers/hand-rolled-mysql.ts, its tables in
 * mysql-peers.ts). The server is BENCH_MYSQL_URL (default mysql://root@127.0.0.1:3306/test): a user that may
 * create and drop databases.
 */
export const DEFAULT_MYSQL_URL = 'mysql://root@127.0.0.1:3306/test';

/** Rows per seeding INSERT: well under max_allowed_packet. */
const SEED_BATCH = 1000;

/** A connection to the database `url` names, or to none (database undefined). */
export async function connectMysql(url: string, database: string | undefined): Promise<Connection> {
  const u = new URL(url.replace(/^mariadb:/, 'mysql:'));
  const socketPath = u.searchParams.get('socketPath');
  return createConnection({
    ...(socketPath === null ? { host: u.hostname, port: u.port === '' ? 3306 : Number(u.port) } : { socketPath }),
    user: decodeURIComponent(u.username) || 'root',
    password: decodeURIComponent(u.password),
    database,
    timezone: 'Z',
  });
}

async function withMysql<T>(url: string, database: string | undefined, f: (c: Connection) => Promise<T>): Promise<T> {
  const c = await connectMysql(url, database);
  try {
    return await f(c);
  } finally {
    await c.end();
  }
}

const databaseOf = (url: string) => decodeURIComponent(new URL(url.replace(/^mariadb:/, 'mysql:')).pathname.slice(1));

/** A fresh empty database for the service (utf8mb4, binary collation, as db:create makes it); drop() removes it. */
export async function createMysqlBenchDatabase(adminUrl: string, name = `bench_${randomBytes(4).toString('hex')}`) {
  await withMysql(adminUrl, undefined, (c) => c.query(`CREATE DATABASE \`${name}\` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin`));
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    drop: () => withMysql(adminUrl, undefined, (c) => c.query(`DROP DATABASE IF EXISTS \`${name}\``)).then(() => undefined),
  };
}

/** The BOOKS books straight into the service's stock_items, after its migrations made the table. */
export async function seedMysqlBooks(url: string): Promise<void> {
  await withMysql(url, databaseOf(url), async (c) => {
    for (let first = 1; first <= BOOKS; first += SEED_BATCH) {
      const rows: [string, string, number, number, Date][] = [];
      const now = new Date();
      for (let n = first; n < Math.min(first + SEED_BATCH, BOOKS + 1); n++) rows.push([bookId(n), `Book ${n}`, ON_HAND, 0, now]);
      await c.query('INSERT INTO stock_items (book_id, title, on_hand, reserved, updated_at) VALUES ?', [rows]);
    }
    await c.query('ANALYZE TABLE stock_items');
  });
}

async function numbers(c: Connection, sql: string): Promise<Record<string, number>> {
  const [rows] = await c.query<RowDataPacket[]>(sql);
  return Object.fromEntries(Object.entries(rows[0] ?? {}).map(([k, v]) => [k, Number(v)]));
}

/** sum(reserved) over the books of the database `url` names (the peer's exactly-once check). */
export async function sumReservedMysql(url: string): Promise<number> {
  return withMysql(url, databaseOf(url), async (c) => (await numbers(c, 'SELECT coalesce(sum(reserved), 0) AS s FROM stock_items')).s ?? 0);
}

/** Waits (bounded) until no inbox row is in progress: requests cut off at the end of a cell finish. */
export async function settleMysql(url: string): Promise<void> {
  for (let i = 0; i < 150; i++) {
    const n = await withMysql(
      url,
      databaseOf(url),
      async (c) => (await numbers(c, 'SELECT count(*) AS n FROM inbox WHERE completed_at IS NULL')).n,
    );
    if (n === 0) return;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

/** Exactly once in the service's database after the load, as the PostgreSQL run checks it. */
export async function checkMysqlInvariants(url: string): Promise<{ ok: boolean; detail: Record<string, number> }> {
  return withMysql(url, databaseOf(url), async (c) => {
    const d = await numbers(
      c,
      `SELECT (SELECT count(*) FROM inbox WHERE consumer = 'inventory.reserve-stock') AS inbox_rows,
              (SELECT count(*) FROM inbox WHERE completed_at IS NULL) AS in_progress,
              (SELECT count(*) FROM stock_reservations) AS reservations,
              (SELECT coalesce(sum(reserved), 0) FROM stock_items) AS reserved,
              (SELECT count(*) FROM stock_reservations r WHERE NOT EXISTS
                 (SELECT 1 FROM inbox i WHERE i.message_id = r.reserved_by AND i.consumer = 'inventory.reserve-stock')) AS orphans`,
    );
    const ok = d.in_progress === 0 && d.inbox_rows === d.reservations && d.reserved === d.reservations && d.orphans === 0;
    return { ok, detail: d };
  });
}

/** The server's version string (SELECT version()). */
export async function mysqlVersion(url: string): Promise<string> {
  return withMysql(url, undefined, async (c) =>
    String(((await c.query<RowDataPacket[]>('SELECT version() AS v'))[0][0] as { v: string }).v),
  );
}

/**
 * The local server's process (mariadbd or mysqld), for its CPU per message; undefined when the server
 * is not on this machine or not visible. A shared server's CPU includes whatever else it serves.
 */
export function mysqlServerPid(): number | undefined {
  for (const name of ['mariadbd', 'mysqld']) {
    try {
      const pid = Number(execFileSync('pgrep', ['-x', '-o', name], { encoding: 'utf8' }).trim());
      if (pid > 0) return pid;
    } catch {
      // not running under this name
    }
  }
  return undefined;
}

/** Starts the hand-rolled mysql2 peer (bench/peers/hand-rolled-mysql.ts) on the peer's database. */
export async function startMysqlPeer(benchDir: string, workDir: string, cwd: string, databaseUrl: string): Promise<BenchProcess> {
  const port = await freePort();
  return startNode(
    'hand-rolled',
    ['--import', 'tsx', join(benchDir, 'peers', 'hand-rolled-mysql.ts')],
    { PORT: String(port), DATABASE_URL: databaseUrl, PEER_POOL_MAX: '10' },
    { readyPath: '/health/ready', logFile: join(workDir, 'hand-rolled-mysql.log'), cwd },
  );
}
