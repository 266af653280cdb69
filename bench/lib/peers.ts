import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createConnection } from 'node:net';
import { join } from 'node:path';
import { freePort, startNode, type BenchProcess } from './processes.js';
import { BOOKS, createBenchDatabase, ON_HAND, withClient } from './postgres.js';

/**
 * The peers: what a developer would build instead of the service, run beside it in the same run.
 * Both get their own database in the cluster (the service's tables stay untouched), seeded with the
 * same 10,000 book ids; the Powertools peer also gets its own Redis.
 */

export const PEERS = ['hand-rolled', 'powertools'] as const;
export type Peer = (typeof PEERS)[number];

export const PEER_LABELS: Record<Peer, string> = {
  'hand-rolled': 'hand-rolled transaction',
  powertools: 'Powertools + Redis',
};

/** A database for the peers: stock_items with the 10,000 books, and the hand-rolled peer's inbox. */
export async function createPeersDatabase(adminUrl: string, name: string): Promise<{ url: string; drop(): Promise<void> }> {
  const database = await createBenchDatabase(adminUrl, name);
  await withClient(database.url, async (c) => {
    await c.query(`
      CREATE TABLE stock_items (book_id uuid PRIMARY KEY, title text NOT NULL, on_hand bigint NOT NULL, reserved bigint NOT NULL);
      CREATE TABLE inbox (message_id varchar(200), consumer varchar(100), received_at timestamptz NOT NULL,
                          PRIMARY KEY (message_id, consumer))`);
    await c.query(
      `INSERT INTO stock_items (book_id, title, on_hand, reserved)
       SELECT ('00000000-0000-4000-8000-' || lpad(g::text, 12, '0'))::uuid, 'Book ' || g, $1, 0 FROM generate_series(1, $2::int) g`,
      [ON_HAND, BOOKS],
    );
    await c.query('VACUUM ANALYZE stock_items');
  });
  return database;
}

/** sum(reserved) over the peers' books: what the exactly-once check compares with the 201 answers. */
export async function sumReserved(url: string): Promise<number> {
  return withClient(url, async (c) =>
    Number((await c.query<{ s: string }>('SELECT coalesce(sum(reserved), 0) AS s FROM stock_items')).rows[0]!.s),
  );
}

export interface RedisServer {
  readonly pid: number;
  readonly url: string;
  stop(): Promise<void>;
}

function ping(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1000, () => done(false));
    socket.on('error', () => done(false));
    socket.on('connect', () => socket.write('PING\r\n'));
    socket.on('data', (d) => done(d.toString().startsWith('+PONG')));
  });
}

/**
 * Starts Debian's redis-server on a free loopback port, persistence off (no RDB, no AOF), its files
 * in dir. Never touches another Redis on the machine.
 */
export async function startRedis(dir: string): Promise<RedisServer> {
  const port = await freePort();
  const child = spawn(
    'redis-server',
    [
      '--bind',
      '127.0.0.1',
      '--port',
      String(port),
      '--save',
      '',
      '--appendonly',
      'no',
      '--daemonize',
      'no',
      '--dir',
      dir,
      '--logfile',
      join(dir, 'redis.log'),
    ],
    { stdio: 'ignore' },
  );
  const spawnError = new Promise<Error>((resolve) => child.once('error', resolve));
  const exited = once(child, 'exit');
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null && child.pid !== undefined) {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    }
  };
  const deadline = Date.now() + 15_000;
  while (Date.now() < deadline) {
    const failed = await Promise.race([spawnError, new Promise<undefined>((r) => setTimeout(r, 100, undefined))]);
    if (failed !== undefined) {
      throw new Error(`cannot start redis-server (${failed.message}): install Debian's redis-server package, or run with --no-peers`);
    }
    if (child.exitCode !== null) throw new Error(`redis-server exited with ${child.exitCode}; see ${join(dir, 'redis.log')}`);
    if (await ping(port)) return { pid: child.pid!, url: `redis://127.0.0.1:${port}`, stop };
  }
  await stop();
  throw new Error('redis-server did not answer PING within 15 s');
}

/** Starts a peer server (bench/peers/<name>.ts) in its own process. */
export async function startPeer(
  peer: Peer,
  benchDir: string,
  workDir: string,
  cwd: string,
  env: { databaseUrl: string; redisUrl?: string },
): Promise<BenchProcess> {
  const port = await freePort();
  const entry = join(benchDir, 'peers', peer === 'hand-rolled' ? 'hand-rolled.ts' : 'powertools-redis.ts');
  return startNode(
    peer,
    ['--import', 'tsx', entry],
    {
      PORT: String(port),
      DATABASE_URL: env.databaseUrl,
      ...(env.redisUrl === undefined ? {} : { REDIS_URL: env.redisUrl }),
      PEER_POOL_MAX: '10',
    },
    { readyPath: '/health/ready', logFile: join(workDir, `${peer}.log`), cwd },
  );
}

/**
 * A database for the hand-rolled amqplib consumer: the peers' tables, its inbox stamping received_at
 * (the transaction's start) and completed_at (at the insert) by column defaults, so the drain window
 * is read from the table, as the service's is from its inbox.
 */
export async function createAmqpPeerDatabase(adminUrl: string, name: string): Promise<{ url: string; drop(): Promise<void> }> {
  const database = await createPeersDatabase(adminUrl, name);
  await withClient(database.url, (c) =>
    c.query(`ALTER TABLE inbox ALTER COLUMN received_at SET DEFAULT now(),
                               ADD COLUMN completed_at timestamptz NOT NULL DEFAULT clock_timestamp()`),
  );
  return database;
}

/** Starts the hand-rolled amqplib consumer (bench/peers/amqp-hand-rolled.ts) in its own process. */
export async function startAmqpPeer(
  benchDir: string,
  workDir: string,
  cwd: string,
  env: { databaseUrl: string; amqpUrl: string; queue: string; prefetch: number },
  onSpawn?: (pid: number) => void,
): Promise<BenchProcess> {
  const port = await freePort();
  return startNode(
    'amqp-hand-rolled',
    ['--import', 'tsx', join(benchDir, 'peers', 'amqp-hand-rolled.ts')],
    {
      PORT: String(port),
      DATABASE_URL: env.databaseUrl,
      AMQP_URL: env.amqpUrl,
      AMQP_QUEUE: env.queue,
      AMQP_PREFETCH: String(env.prefetch),
      PEER_POOL_MAX: '10',
    },
    { readyPath: '/health/ready', logFile: join(workDir, 'amqp-hand-rolled.log'), cwd, ...(onSpawn ? { onSpawn } : {}) },
  );
}
