import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { promisify } from 'node:util';
import { connect } from 'amqplib';
import pg from 'pg';
import { orderId, orderPlacedBody, type Keys } from './load.js';
import { BOOKS } from './postgres.js';
import { cpuMs, peakRss } from './processes.js';

/**
 * The AMQP cell's parts: a RabbitMQ vhost of the run's own, N order-placed messages queued on it
 * before a consumer starts, the consumer's CPU traced from its first instant, and its drain window
 * read from its own inbox's timestamps.
 */

const run = promisify(execFile);

export const DEFAULT_AMQP_URL = 'amqp://guest:guest@127.0.0.1:5672';
const LOOPBACK = new Set(['127.0.0.1', 'localhost', '[::1]']);

/** The broker URL, refused unless it is on this machine (the bench sends traffic to loopback only). */
export function loopbackUrl(raw: string, what: string): URL {
  const url = new URL(raw);
  if (!LOOPBACK.has(url.hostname)) throw new Error(`${what} must point at 127.0.0.1, got ${url.hostname}`);
  return url;
}

export interface Vhost {
  readonly name: string;
  /** The AMQP URL of the vhost. */
  readonly url: string;
  readonly method: 'management API' | 'rabbitmqctl';
  /** Deletes the vhost and everything on it; safe to call twice. */
  drop(): Promise<void>;
}

function managementApi(user: string, password: string) {
  const base = loopbackUrl(process.env.BENCH_RABBITMQ_MANAGEMENT_URL ?? 'http://127.0.0.1:15672', 'BENCH_RABBITMQ_MANAGEMENT_URL');
  const headers = { authorization: `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`, 'content-type': 'application/json' };
  const call = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(new URL(path, base), {
      method,
      headers,
      signal: AbortSignal.timeout(10_000),
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    if (res.status >= 300 && !(method === 'DELETE' && res.status === 404))
      throw new Error(`${method} ${path}: ${res.status} ${text.slice(0, 200)}`);
  };
  return {
    available: () =>
      call('GET', '/api/overview').then(
        () => true,
        () => false,
      ),
    call,
  };
}

function rabbitmqctl(...args: string[]): Promise<unknown> {
  const node = process.env.BENCH_RABBITMQ_NODE;
  return run('rabbitmqctl', ['-q', ...(node ? ['-n', node] : []), ...args], { timeout: 60_000 });
}

/**
 * A vhost for this run, with full permissions for the URL's user: through the management HTTP API
 * when it answers (BENCH_RABBITMQ_MANAGEMENT_URL, default http://127.0.0.1:15672), else through
 * `rabbitmqctl add_vhost` / `set_permissions` (the local node, or BENCH_RABBITMQ_NODE).
 */
export async function createVhost(baseUrl: string, name: string): Promise<Vhost> {
  const base = loopbackUrl(baseUrl, 'BENCH_AMQP_URL');
  const user = decodeURIComponent(base.username || 'guest');
  const password = decodeURIComponent(base.password || 'guest');
  const url = new URL(base);
  url.pathname = `/${encodeURIComponent(name)}`;
  const api = managementApi(user, password);
  const path = `/api/vhosts/${encodeURIComponent(name)}`;
  let dropped = false;
  const make = (method: Vhost['method'], remove: () => Promise<unknown>): Vhost => ({
    name,
    url: url.toString(),
    method,
    drop: async () => {
      if (dropped) return;
      dropped = true;
      await remove();
    },
  });
  if (await api.available()) {
    const vhost = make('management API', () => api.call('DELETE', path));
    await api.call('PUT', path, {});
    await api
      .call('PUT', `/api/permissions/${encodeURIComponent(name)}/${encodeURIComponent(user)}`, { configure: '.*', write: '.*', read: '.*' })
      .catch(async (error: unknown) => {
        await vhost.drop();
        throw error;
      });
    return vhost;
  }
  const vhost = make('rabbitmqctl', () => rabbitmqctl('delete_vhost', name));
  try {
    await rabbitmqctl('add_vhost', name);
  } catch (error) {
    throw new Error(`cannot create a RabbitMQ vhost: no management API answers, and rabbitmqctl add_vhost failed: ${String(error)}`, {
      cause: error,
    });
  }
  await rabbitmqctl('set_permissions', '-p', name, user, '.*', '.*', '.*').catch(async (error: unknown) => {
    await vhost.drop();
    throw error;
  });
  return vhost;
}

/**
 * Queues n new order-placed messages (persistent, publisher confirms) on a durable queue and checks
 * they are all there; returns the prefix every message id of the batch starts with.
 */
export async function queueOrders(
  url: string,
  queue: string,
  queueArguments: Record<string, string>,
  keys: Keys,
  label: string,
  n: number,
): Promise<string> {
  const { messagePrefix, orderPrefix } = keys.next(label);
  const model = await openQuietly(url);
  try {
    const channel = await model.createConfirmChannel();
    channel.on('error', () => undefined);
    await channel.assertQueue(queue, { durable: true, arguments: queueArguments });
    for (let i = 1; i <= n; i++) {
      const id = `${messagePrefix}-${i}`;
      const body = Buffer.from(orderPlacedBody(id, orderId(orderPrefix, i), 1 + Math.floor(Math.random() * BOOKS)));
      if (!channel.sendToQueue(queue, body, { persistent: true, contentType: 'application/json' })) await once(channel, 'drain');
      if (i % 1000 === 0) await channel.waitForConfirms();
    }
    await channel.waitForConfirms();
    const { messageCount } = await channel.checkQueue(queue);
    if (messageCount !== n) throw new Error(`queued ${n} messages on ${queue} but it holds ${messageCount}`);
    return messagePrefix;
  } finally {
    await model.close().catch(() => undefined);
  }
}

/**
 * A connection whose errors (a channel the broker closed, the vhost deleted under it) reject the
 * call that met them instead of ending the runner with an unhandled 'error' event.
 */
async function openQuietly(url: string): Promise<Awaited<ReturnType<typeof connect>>> {
  const model = await connect(url);
  model.on('error', () => undefined);
  return model;
}

/** A connection of the runner's to the vhost: queue depths, purges, and a queue bound to the events exchange. */
export class BrokerProbe {
  private constructor(
    private readonly model: Awaited<ReturnType<typeof connect>>,
    private readonly channel: Awaited<ReturnType<Awaited<ReturnType<typeof connect>>['createChannel']>>,
  ) {}

  static async open(url: string): Promise<BrokerProbe> {
    const model = await openQuietly(url);
    const channel = await model.createChannel();
    channel.on('error', () => undefined);
    return new BrokerProbe(model, channel);
  }

  /** Ready messages in a queue. */
  async depth(queue: string): Promise<number> {
    return (await this.channel.checkQueue(queue)).messageCount;
  }

  async purge(queue: string): Promise<void> {
    await this.channel.purgeQueue(queue).catch(() => undefined);
  }

  /** A queue of the bench's own bound to the events exchange ('#'): what a downstream consumer receives. */
  async tap(exchange: string, name: string): Promise<string> {
    await this.channel.assertExchange(exchange, 'topic', { durable: true });
    await this.channel.assertQueue(name, { durable: false, exclusive: true });
    await this.channel.bindQueue(name, exchange, '#');
    return name;
  }

  async deleteQueue(name: string): Promise<void> {
    await this.channel.deleteQueue(name).catch(() => undefined);
  }

  async close(): Promise<void> {
    await this.model.close().catch(() => undefined);
  }
}

interface Sample {
  t: number;
  node: number;
  pg: number | undefined;
}

/**
 * CPU of one process and of PostgreSQL, sampled every 50 ms from before the process exists, so the
 * CPU of any window (the drain, read afterwards from the inbox's timestamps) can be interpolated.
 */
export class CpuTrace {
  private readonly samples: Sample[] = [];
  private pid: number | undefined;
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly pgCpu: () => number | undefined) {
    this.sample();
    this.timer = setInterval(() => this.sample(), 50);
  }

  /** The process to follow, from its first instant (spawn). */
  follow(pid: number): void {
    this.pid = pid;
    this.sample();
  }

  private sample(): void {
    this.samples.push({ t: Date.now(), node: this.pid === undefined ? 0 : cpuMs(this.pid), pg: this.pgCpu() });
  }

  stop(): void {
    this.sample();
    clearInterval(this.timer);
  }

  private at(t: number, key: 'node' | 'pg'): number | undefined {
    const s = this.samples;
    let i = 0;
    while (i < s.length - 1 && s[i + 1]!.t <= t) i++;
    const a = s[i]!;
    const b = s[Math.min(i + 1, s.length - 1)]!;
    const va = a[key];
    const vb = b[key];
    if (va === undefined || vb === undefined) return undefined;
    if (b.t <= a.t || t <= a.t) return va;
    return va + (vb - va) * Math.min(1, (t - a.t) / (b.t - a.t));
  }

  /** CPU ms of the process and of PostgreSQL between two instants (ms since the epoch). */
  between(from: number, to: number): { node: number; pg: number | null } {
    const pgFrom = this.at(from, 'pg');
    const pgTo = this.at(to, 'pg');
    return {
      node: this.at(to, 'node')! - this.at(from, 'node')!,
      pg: pgFrom === undefined || pgTo === undefined ? null : pgTo - pgFrom,
    };
  }

  /** The followed process's peak RSS so far (VmHWM: it started with the trace), in MB. */
  peakRssMb(): number | null {
    const bytes = this.pid === undefined ? undefined : peakRss(this.pid);
    return bytes === undefined ? null : Math.round((bytes / (1024 * 1024)) * 10) / 10;
  }
}

/** Polls until check() is true, at most timeoutMs; alive() throws if the consumer died meanwhile. */
export async function waitUntil(what: string, timeoutMs: number, check: () => Promise<boolean>, alive: () => void): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (let i = 0; i < Math.ceil(timeoutMs / 200) + 1; i++) {
    if (await check()) return;
    alive();
    if (Date.now() > deadline) break;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  throw new Error(`timed out after ${Math.round(timeoutMs / 1000)} s waiting for ${what}`);
}

/** A client for the runner's polling, and its backend pid (left out of the backends' CPU). */
export async function pollClient(url: string): Promise<{ client: pg.Client; backendPid: number }> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const backendPid = (await client.query<{ p: number }>('SELECT pg_backend_pid() AS p')).rows[0]!.p;
  return { client, backendPid };
}

export interface InboxWindow {
  rows: number;
  completed: number;
  /** min(received_at) and max(completed_at), ms since the epoch. */
  firstReceivedMs: number;
  lastCompletedMs: number;
  /** Distinct received_at: the transactions that claimed the rows (a batch shares its received_at). */
  transactions: number;
}

/** The batch's inbox rows of one consumer, and their drain window. */
export async function inboxWindow(client: pg.Client, consumer: string, prefix: string): Promise<InboxWindow> {
  const row = (
    await client.query<Record<string, string | null>>(
      `SELECT count(*) AS rows, count(completed_at) AS completed,
              extract(epoch FROM min(received_at)) * 1000 AS first, extract(epoch FROM max(completed_at)) * 1000 AS last,
              count(DISTINCT received_at) AS transactions
       FROM inbox WHERE consumer = $1 AND message_id LIKE $2`,
      [consumer, `${prefix}-%`],
    )
  ).rows[0]!;
  return {
    rows: Number(row.rows),
    completed: Number(row.completed),
    firstReceivedMs: Number(row.first),
    lastCompletedMs: Number(row.last),
    transactions: Number(row.transactions),
  };
}

export async function countOf(client: pg.Client, sql: string, values: unknown[] = []): Promise<number> {
  return Number((await client.query<{ n: string }>(sql, values)).rows[0]!.n);
}
