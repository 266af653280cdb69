/**
 * Torture run, AMQP mode (`npm run torture -- --amqp [--short]`): commands in through RabbitMQ, events
 * out through the outbox, under faults. A producer publishes N orders to the order-placed queue, many of
 * them twice or more (same message id) and some again under a new message id (a producer duplicate);
 * the service processes are killed with kill -9 several times and the RabbitMQ node is restarted once
 * while the traffic runs. At the end, read from the database and the events that came out:
 *   - every order is reserved exactly once (one reservation row, the right quantity, stock counts agree);
 *   - every reservation's stock-reserved event was published at least once (its id as message-id);
 *   - distinct stock-reserved event ids equal reservations (no event for a duplicate);
 *   - nothing is left pending in the outbox or in the command queue, and nothing was dead-lettered.
 *
 * The broker is a throwaway node of this run's own (scripts/rabbitmq-throwaway.sh), so restarting it
 * disturbs nobody; PostgreSQL is TORTURE_POSTGRES_URL / TEST_POSTGRES_URL, or a throwaway cluster.
 * Options: --short (the CI variant), --seed N, TORTURE_AMQP_ORDERS, TORTURE_TRAFFIC_S, --keep.
 * Traffic stays on 127.0.0.1; every loop is bounded in count and time; everything started is stopped.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { connect, type ChannelModel, type ConfirmChannel } from 'amqplib';
import pg from 'pg';
import { stockEventId, STOCK_RESERVED } from '../src/inventory/stock-events.js';
import { RESERVE_STOCK } from '../src/inventory/order.commands.js';
import { freePort } from './free-port.js';
import { mulberry32 } from './seeded-random.js';

const repoRoot = fileURLToPath(new URL('..', import.meta.url));
const rabbitScript = join(repoRoot, 'scripts', 'rabbitmq-throwaway.sh');
const pgScript = join(repoRoot, 'scripts', 'pg-throwaway.sh');
const ADMIN_TOKEN = `torture-${randomBytes(12).toString('hex')}`;
const ORDER_QUEUE = 'inventory.order-placed';
const EXCHANGE = 'inventory.events';
const TAP_QUEUE = 'torture.events-tap';

const argv = process.argv;
const short = argv.includes('--short') || process.env.TORTURE_SHORT === '1';
const keep = argv.includes('--keep') || process.env.TORTURE_KEEP === '1';
const seedArg = argv.includes('--seed') ? argv[argv.indexOf('--seed') + 1] : process.env.TORTURE_SEED;
const seed = seedArg === undefined ? randomBytes(4).readUInt32BE() : Number(seedArg) >>> 0;

const plan = {
  variant: short ? 'short' : 'long',
  processes: 2,
  orders: Number(process.env.TORTURE_AMQP_ORDERS ?? (short ? 400 : 4000)),
  trafficMs: Number(process.env.TORTURE_TRAFFIC_S ?? (short ? 30 : 300)) * 1000,
  kills: short ? 3 : 12,
  brokerRestarts: 1,
  books: 12,
  drainMs: short ? 60_000 : 120_000,
  hardLimitMs: short ? 200_000 : 1_200_000,
};

// ---------------------------------------------------------------------------------------------
// Bookkeeping

const started = Date.now();
const say = (line: string) => process.stdout.write(`[${((Date.now() - started) / 1000).toFixed(1).padStart(6)}s] ${line}\n`);
const violations: string[] = [];
const violation = (kind: string, detail: string) => {
  violations.push(`${kind}: ${detail}`);
  say(`VIOLATION ${kind}: ${detail}`);
};
const stats = { orders: 0, publishes: 0, duplicatePublishes: 0, producerDuplicates: 0, publishRetries: 0, failedConnects: 0, crashes: 0, brokerRestarts: 0, eventsReceived: 0, eventRedeliveries: 0, unexpectedExits: 0 };

const rng = mulberry32(seed);
const between = (min: number, max: number) => min + Math.floor(rng() * (max - min + 1));

// ---------------------------------------------------------------------------------------------
// Processes this run starts: stopped at the end whatever happens

const children = new Set<ChildProcess>();
let rabbitDir: string | undefined;
let pgDir: string | undefined;
let shuttingDown = false;

function cleanupSync(): void {
  shuttingDown = true;
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  if (rabbitDir !== undefined && !keep) spawnSync(rabbitScript, ['stop', rabbitDir], { stdio: 'ignore' });
  if (pgDir !== undefined && !keep) spawnSync(pgScript, ['stop', pgDir], { stdio: 'ignore' });
  rabbitDir = undefined;
  pgDir = undefined;
}
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    say(`${signal}: stopping everything this run started`);
    cleanupSync();
    process.exit(130);
  });
}
process.on('exit', cleanupSync);

function run(command: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (err += c.toString()));
    child.on('close', (code) => (code === 0 ? resolve(out.trim()) : reject(new Error(`${command} ${args.join(' ')} exited ${code}: ${err.slice(-500)}`))));
  });
}

class Service {
  child: ChildProcess | undefined;
  expectingExit = false;
  private tail: string[] = [];

  constructor(
    readonly index: number,
    readonly port: number,
    private readonly env: Record<string, string>,
  ) {}

  async start(): Promise<void> {
    for (let attempt = 1; attempt <= 10; attempt++) {
      const child = spawn(process.execPath, ['--import', 'tsx', 'src/server.ts'], {
        cwd: repoRoot,
        env: { ...this.env, PORT: String(this.port) },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      this.child = child;
      children.add(child);
      for (const stream of [child.stdout!, child.stderr!]) {
        stream.on('data', (chunk: Buffer) => {
          this.tail.push(...chunk.toString().split('\n').filter((l) => l !== '').map((l) => l.slice(0, 600)));
          this.tail = this.tail.slice(-200);
        });
      }
      child.once('exit', (code, signal) => {
        children.delete(child);
        if (this.child === child && !this.expectingExit && !shuttingDown) {
          stats.unexpectedExits++;
          // The first error or fatal line says why; the last lines say how it ended.
          const cause = this.tail.find((l) => /"level":(50|60)/.test(l));
          violation('unexpected-exit', `service ${this.index} exited on its own (code ${code}, signal ${signal}): ${cause ?? ''} | … | ${this.tail.slice(-3).join(' | ')}`);
        }
      });
      const deadline = Date.now() + 60_000;
      while (Date.now() < deadline && child.exitCode === null) {
        try {
          const res = await fetch(`http://127.0.0.1:${this.port}/health/live`, { signal: AbortSignal.timeout(1000) });
          await res.arrayBuffer();
          if (res.ok) return;
        } catch {
          // not listening yet
        }
        await sleep(100);
      }
      say(`service ${this.index} did not start (attempt ${attempt}); retrying`);
      this.expectingExit = true;
      child.kill('SIGKILL');
      await sleep(500);
      this.expectingExit = false;
    }
    throw new Error(`service ${this.index} did not start: ${this.tail.slice(-5).join(' | ')}`);
  }

  async kill9(): Promise<void> {
    const child = this.child;
    if (child === undefined || child.exitCode !== null) return;
    this.expectingExit = true;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
    this.expectingExit = false;
  }

  async stop(): Promise<void> {
    const child = this.child;
    if (child === undefined || child.exitCode !== null || child.signalCode !== null) return;
    this.expectingExit = true;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
    await exited;
    clearTimeout(timer);
  }
}

// ---------------------------------------------------------------------------------------------
// Producer and event collector: at-least-once clients that reconnect across the broker restart

interface Order {
  orderId: string;
  bookId: string;
  quantity: number;
  /** Message ids this order was sent under (a producer duplicate adds a second one). */
  messageIds: string[];
}

/** A connection for the run's own clients, opened again whenever it drops. */
class ClientConnection {
  model: ChannelModel | undefined;
  channel: ConfirmChannel | undefined;

  constructor(
    private readonly url: string,
    private readonly setup: (channel: ConfirmChannel) => Promise<void>,
  ) {}

  async ensure(deadline: number): Promise<ConfirmChannel> {
    while (Date.now() < deadline) {
      if (this.channel !== undefined) return this.channel;
      try {
        const model = await connect(this.url);
        model.on('error', () => {});
        const channel = await model.createConfirmChannel();
        channel.on('error', () => {});
        const drop = () => {
          if (this.model === model) {
            this.model = undefined;
            this.channel = undefined;
          }
        };
        model.on('close', drop);
        channel.on('close', drop);
        await this.setup(channel);
        this.model = model;
        this.channel = channel;
        return channel;
      } catch {
        stats.failedConnects++;
        await sleep(250);
      }
    }
    throw new Error('could not reach the broker before the deadline');
  }

  async close(): Promise<void> {
    await this.model?.close().catch(() => {});
  }
}

/** Publishes one message until the broker confirms it (at least once), bounded by the deadline. */
async function publishConfirmed(connection: ClientConnection, order: Order, messageId: string, deadline: number): Promise<void> {
  const body = Buffer.from(JSON.stringify({ messageId, data: { orderId: order.orderId, bookId: order.bookId, quantity: order.quantity } }));
  for (let attempt = 1; Date.now() < deadline; attempt++) {
    try {
      const channel = await connection.ensure(deadline);
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('no confirm')), 5000);
        channel.sendToQueue(ORDER_QUEUE, body, { persistent: true, contentType: 'application/json', messageId }, (error: unknown) => {
          clearTimeout(timer);
          if (error) reject(error instanceof Error ? error : new Error(String(error)));
          else resolve();
        });
      });
      stats.publishes++;
      return;
    } catch {
      stats.publishRetries++;
      await sleep(Math.min(2000, 100 * attempt));
    }
  }
  violation('producer', `order ${order.orderId} message ${messageId} was never confirmed by the broker`);
}

// ---------------------------------------------------------------------------------------------
// The run

async function main(): Promise<number> {
  say(`torture AMQP (${plan.variant}): seed ${seed}, ${plan.processes} processes, ${plan.orders} orders over ${plan.trafficMs / 1000} s, ` +
    `faults: ${plan.kills} kill -9, ${plan.brokerRestarts} RabbitMQ restart`);
  const watchdog = setTimeout(() => {
    violation('harness', `the run exceeded its hard limit of ${plan.hardLimitMs / 1000} s`);
    cleanupSync();
    report();
    process.exit(1);
  }, plan.hardLimitMs);
  watchdog.unref();

  rabbitDir = mkdtempSync(join(tmpdir(), 'torture-rmq-'));
  rmSync(rabbitDir, { recursive: true });
  const amqpUrl = await run(rabbitScript, ['start', rabbitDir]);
  say(`throwaway RabbitMQ node at ${amqpUrl}`);

  let adminUrl = process.env.TORTURE_POSTGRES_URL ?? process.env.TEST_POSTGRES_URL;
  if (!adminUrl) {
    pgDir = mkdtempSync(join(tmpdir(), 'torture-pg-'));
    adminUrl = await run(pgScript, ['start', pgDir]);
  }
  const dbName = `torture_amqp_${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${dbName}`);
  await admin.end();
  const dbUrl = new URL(adminUrl);
  dbUrl.pathname = `/${dbName}`;

  const services: Service[] = [];
  const producer = new ClientConnection(amqpUrl, async () => {});
  const received = new Map<string, { type: string; bodyId: string; causation: string; count: number }>();
  let collectorStopped = false;
  const collector = new ClientConnection(amqpUrl, async (channel) => {
    // Durable and bound before any event is published: events published while this client is away wait here.
    await channel.assertExchange(EXCHANGE, 'topic', { durable: true });
    await channel.assertQueue(TAP_QUEUE, { durable: true });
    await channel.bindQueue(TAP_QUEUE, EXCHANGE, '#');
    await channel.prefetch(200);
    await channel.consume(TAP_QUEUE, (message) => {
      if (message === null) return;
      const id = String(message.properties.messageId);
      const body = JSON.parse(message.content.toString()) as { id: string; type: string; causationid: string };
      const seen = received.get(id);
      if (seen === undefined) received.set(id, { type: message.fields.routingKey, bodyId: body.id, causation: body.causationid, count: 1 });
      else {
        seen.count++;
        stats.eventRedeliveries++;
      }
      stats.eventsReceived++;
      try {
        channel.ack(message);
      } catch {
        // the channel closed: the message comes again, and is counted as a repeat
      }
    });
  });
  const keepCollecting = (async () => {
    while (!collectorStopped) {
      await collector.ensure(Date.now() + 60_000).catch(() => undefined);
      await sleep(200);
    }
  })();

  try {
    await collector.ensure(Date.now() + 30_000);
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('WEBHOOK_') && !k.startsWith('AMQP_') && !k.startsWith('OUTBOX_')) env[k] = v;
    Object.assign(env, {
      DATABASE_URL: dbUrl.toString(),
      AMQP_URL: amqpUrl,
      HOST: '127.0.0.1',
      ADMIN_TOKEN,
      LOG_LEVEL: 'warn',
      AMQP_PREFETCH: '16',
      AMQP_RETRY_DELAY_MS: '200',
      AMQP_RETRY_MAX_DELAY_MS: '2000',
      OUTBOX_RELAY_INTERVAL_MS: '200',
      OUTBOX_RELAY_MAX_BACKOFF_MS: '2000',
      SHUTDOWN_GRACE_MS: '5000',
    });
    for (let i = 0; i < plan.processes; i++) services.push(new Service(i, await freePort(), env));
    for (const s of services) await s.start();
    say(`${services.length} service processes up`);

    // Books with far more stock than the orders can take: every order must end up reserved.
    const books = Array.from({ length: plan.books }, () => randomUUID());
    for (const bookId of books) {
      const res = await fetch(`http://127.0.0.1:${services[0]!.port}/stock/${bookId}`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${ADMIN_TOKEN}` },
        body: JSON.stringify({ title: 'Torture book', onHand: plan.orders * 3 }),
        signal: AbortSignal.timeout(10_000),
      });
      if (res.status !== 201) throw new Error(`seeding failed: ${res.status} ${await res.text()}`);
    }

    const orders: Order[] = Array.from({ length: plan.orders }, () => ({
      orderId: randomUUID(),
      bookId: books[Math.floor(rng() * books.length)]!,
      quantity: between(1, 3),
      messageIds: [`order-${randomUUID()}`],
    }));
    const trafficStart = Date.now();
    const trafficEnd = trafficStart + plan.trafficMs;
    const publishDeadline = trafficEnd + plan.drainMs;

    // Faults at random moments inside the traffic window; the broker restart near the middle.
    const killTimes = Array.from({ length: plan.kills }, () => trafficStart + 3000 + rng() * (plan.trafficMs - 8000)).sort((a, b) => a - b);
    const restartAt = trafficStart + plan.trafficMs * (0.35 + rng() * 0.2);
    const faults = [
      (async () => {
        for (const at of killTimes) {
          await sleep(Math.max(0, at - Date.now()));
          const victim = services[Math.floor(rng() * services.length)]!;
          await victim.kill9();
          stats.crashes++;
          say(`kill -9 service ${victim.index}`);
          await sleep(between(300, 1500));
          await victim.start();
        }
      })(),
      (async () => {
        await sleep(Math.max(0, restartAt - Date.now()));
        say('restarting RabbitMQ');
        await run(rabbitScript, ['restart', rabbitDir!]);
        stats.brokerRestarts++;
        say('RabbitMQ is back');
      })(),
    ];

    // The producer: each order once, many twice or three times (same message id), a few again under a
    // new message id; copies are spread out, so some arrive long after the first was processed.
    const copies: { order: Order; messageId: string; at: number }[] = [];
    for (const [i, order] of orders.entries()) {
      const at = trafficStart + (i / orders.length) * (plan.trafficMs - 3000);
      copies.push({ order, messageId: order.messageIds[0]!, at });
      const repeats = rng() < 0.5 ? between(1, 2) : 0;
      for (let r = 0; r < repeats; r++) {
        copies.push({ order, messageId: order.messageIds[0]!, at: Math.min(trafficEnd - 1000, at + rng() * 5000) });
        stats.duplicatePublishes++;
      }
      if (rng() < 0.1) {
        const other = `order-${randomUUID()}`;
        order.messageIds.push(other);
        copies.push({ order, messageId: other, at: Math.min(trafficEnd - 1000, at + rng() * 5000) });
        stats.producerDuplicates++;
      }
    }
    copies.sort((a, b) => a.at - b.at);
    stats.orders = orders.length;
    const lanes = 8;
    await Promise.all(
      Array.from({ length: lanes }, async (_, lane) => {
        for (let i = lane; i < copies.length; i += lanes) {
          const copy = copies[i]!;
          await sleep(Math.max(0, copy.at - Date.now()));
          await publishConfirmed(producer, copy.order, copy.messageId, publishDeadline);
        }
      }),
    );
    say(`producer done: ${stats.publishes} confirmed publishes (${stats.publishRetries} retries)`);
    await Promise.all(faults);

    // Drain: every order in, every event out, or the deadline.
    const db = new pg.Pool({ connectionString: dbUrl.toString(), max: 2 });
    try {
      const drainDeadline = Date.now() + plan.drainMs;
      let state = { reservations: 0, pending: -1, queue: -1, events: 0 };
      while (Date.now() < drainDeadline) {
        const [{ rows: r }, { rows: p }] = await Promise.all([
          db.query<{ n: string }>('select count(*) n from stock_reservations'),
          db.query<{ n: string }>('select count(*) n from outbox where published_at is null'),
        ]);
        const channel = await producer.ensure(drainDeadline).catch(() => undefined);
        const queue = channel === undefined ? -1 : (await channel.checkQueue(ORDER_QUEUE).catch(() => ({ messageCount: -1 }))).messageCount;
        const events = [...received.values()].filter((e) => e.type === STOCK_RESERVED).length;
        state = { reservations: Number(r[0]!.n), pending: Number(p[0]!.n), queue, events };
        if (state.reservations === orders.length && state.pending === 0 && state.queue === 0 && state.events >= orders.length) break;
        await sleep(500);
      }
      say(`drained: ${JSON.stringify(state)}`);
      await sleep(1000); // late repeats of an event, if any, are counted too
      await checkInvariants(db, orders, received);
    } finally {
      await db.end();
    }
  } catch (error) {
    violation('harness', `the run failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  } finally {
    shuttingDown = true;
    collectorStopped = true;
    await Promise.all(services.map((s) => s.stop().catch(() => {})));
    await producer.close();
    await collector.close();
    await keepCollecting;
    if (!keep) {
      const drop = new pg.Client({ connectionString: adminUrl });
      await drop.connect().then(() => drop.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`)).catch(() => {});
      await drop.end().catch(() => {});
    } else say(`kept: database ${dbName}, RabbitMQ node in ${rabbitDir}`);
    cleanupSync();
    clearTimeout(watchdog);
  }
  report();
  return violations.length === 0 ? 0 : 1;
}

async function checkInvariants(db: pg.Pool, orders: Order[], received: Map<string, { type: string; bodyId: string; causation: string; count: number }>): Promise<void> {
  const { rows } = await db.query<{ order_id: string; book_id: string; quantity: number; reserved_by: string; released_at: Date | null }>(
    'select order_id, book_id, quantity, reserved_by, released_at from stock_reservations',
  );
  const byOrder = new Map<string, typeof rows>();
  for (const row of rows) byOrder.set(row.order_id, [...(byOrder.get(row.order_id) ?? []), row]);
  for (const order of orders) {
    const found = byOrder.get(order.orderId) ?? [];
    if (found.length !== 1) violation('reserved-exactly-once', `order ${order.orderId} has ${found.length} reservations`);
    else if (found[0]!.quantity !== order.quantity || found[0]!.book_id !== order.bookId) violation('reservation', `order ${order.orderId} reserved ${found[0]!.quantity} of ${found[0]!.book_id}`);
    else if (!order.messageIds.includes(found[0]!.reserved_by)) violation('reservation', `order ${order.orderId} reserved by unknown message ${found[0]!.reserved_by}`);
  }
  if (rows.length !== orders.length) violation('reservations', `${rows.length} reservations for ${orders.length} orders`);

  const { rows: stock } = await db.query<{ book_id: string; reserved: number; sum: string | null }>(
    `select s.book_id, s.reserved, (select sum(quantity) from stock_reservations r where r.book_id = s.book_id and r.released_at is null) sum from stock_items s`,
  );
  for (const s of stock) if (s.reserved !== Number(s.sum ?? 0)) violation('stock', `book ${s.book_id}: reserved ${s.reserved}, reservations sum to ${s.sum}`);

  const reservedEvents = [...received.entries()].filter(([, e]) => e.type === STOCK_RESERVED);
  for (const row of rows) {
    const id = stockEventId(RESERVE_STOCK, row.reserved_by, row.book_id);
    const event = received.get(id);
    if (event === undefined) violation('event-published', `no stock-reserved event ${id} for order ${row.order_id}`);
    else if (event.bodyId !== id || event.causation !== row.reserved_by) violation('event-body', `event ${id}: body id ${event.bodyId}, causation ${event.causation}`);
  }
  if (reservedEvents.length !== rows.length) violation('distinct-events', `${reservedEvents.length} distinct stock-reserved event ids for ${rows.length} reservations`);
  const others = [...received.values()].filter((e) => e.type !== STOCK_RESERVED);
  if (others.length > 0) violation('unexpected-events', `${others.length} events of other types (${[...new Set(others.map((e) => e.type))].join(', ')})`);

  const { rows: pending } = await db.query<{ n: string }>('select count(*) n from outbox where published_at is null');
  if (Number(pending[0]!.n) !== 0) violation('outbox', `${pending[0]!.n} events still pending`);
  const { rows: letters } = await db.query<{ n: string }>('select count(*) n from dead_letters');
  if (Number(letters[0]!.n) !== 0) violation('dead-letters', `${letters[0]!.n} dead letters`);
  const { rows: outboxRows } = await db.query<{ n: string }>('select count(*) n from outbox');
  say(`checked: ${rows.length} reservations, ${reservedEvents.length} distinct events received (${stats.eventRedeliveries} repeats), ${outboxRows[0]!.n} outbox rows`);
}

function report(): void {
  const lines = [
    '== torture summary (AMQP)',
    `variant:                 ${plan.variant}`,
    `seed:                    ${seed}`,
    `orders:                  ${stats.orders}`,
    `confirmed publishes:     ${stats.publishes} (${stats.duplicatePublishes} same-id copies, ${stats.producerDuplicates} new-id duplicates, ${stats.publishRetries} retries)`,
    `kill -9:                 ${stats.crashes}`,
    `RabbitMQ restarts:       ${stats.brokerRestarts} (clients failed to connect ${stats.failedConnects} times meanwhile)`,
    `events received:         ${stats.eventsReceived} (${stats.eventRedeliveries} repeats)`,
    `unexpected exits:        ${stats.unexpectedExits}`,
    `invariant violations:    ${violations.length}`,
    ...violations.slice(0, 30).map((v) => `  ${v}`),
  ];
  process.stdout.write(`\n${lines.join('\n')}\n`);
  process.stdout.write(`TORTURE_RESULT ${JSON.stringify({ mode: 'amqp', variant: plan.variant, seed, ...stats, violations: violations.length })}\n`);
}

process.exit(await main());
