import type pg from 'pg';
import {
  BrokerProbe,
  countOf,
  CpuTrace,
  createVhost,
  inboxWindow,
  pollClient,
  queueOrders,
  waitUntil,
  type InboxWindow,
  type Vhost,
} from './amqp.js';
import type { Keys } from './load.js';
import { createAmqpPeerDatabase } from './peers.js';
import { checkpoint, createBenchDatabase, seedBooks } from './postgres.js';
import type { BenchProcess } from './processes.js';
import type { AmqpRecord, AmqpRun, AmqpTarget, CellRecord } from './report.js';
import { median } from './stats.js';

/**
 * The AMQP cell: N order-placed messages queued first on the run's own vhost, then a consumer
 * started — the service (compiled, AMQP_URL on that vhost, prefetch 32, the outbox relay on), or the
 * hand-rolled amqplib peer — and drained to the last message, each on a database of its own.
 * Throughput is N over the consumer's own inbox window, first received_at to last completed_at.
 */

const SERVICE_QUEUE = 'inventory.order-placed';
const SERVICE_QUEUE_ARGUMENTS = { 'x-dead-letter-exchange': 'inventory.dead-letter' };
const EVENTS_EXCHANGE = 'inventory.events';
const PEER_QUEUE = 'bench.peer.order-placed';
const SERVICE_CONSUMER = 'inventory.reserve-stock';
const PEER_CONSUMER = 'inventory';

export interface AmqpCellOptions {
  adminUrl: string;
  runTag: string;
  keys: Keys;
  messages: number;
  prefetch: number;
  repeat: number;
  /** The broker, without a vhost (BENCH_AMQP_URL). */
  amqpUrl: string;
  /** Starts the compiled service on a database with extra environment; onSpawn gets its pid at once. */
  startService: (name: string, databaseUrl: string, env: Record<string, string>, onSpawn?: (pid: number) => void) => Promise<BenchProcess>;
  /** Starts the hand-rolled amqplib consumer. */
  startPeer: (
    env: { databaseUrl: string; amqpUrl: string; queue: string; prefetch: number },
    onSpawn: (pid: number) => void,
  ) => Promise<BenchProcess>;
  /** A reader of PostgreSQL's CPU ms for a database, leaving out the given backends; what it counts. */
  pgCpu: (database: string, exclude: Set<number>) => () => number | undefined;
  pgCpuSource: string;
  /** Registers a clean-up that runs at the end, also on failure and Ctrl-C. */
  onCleanup: (f: () => Promise<void>) => void;
  log: (message: string) => void;
}

interface Context extends AmqpCellOptions {
  vhost: Vhost;
  probe: BrokerProbe;
  serviceDb: { url: string; name: string };
  peerDb: { url: string; name: string };
}

/** Bounds: the drain at ≥ 20 msgs/s (at least 2 min), the relay's tail 1 min + 10 ms per event. */
const drainTimeoutMs = (n: number) => Math.max(120_000, n * 50);
const relayTimeoutMs = (n: number) => 60_000 + n * 10;

/** Runs the cell: vhost and databases set up, alternating service and peer drains, the vhost deleted. */
export async function amqpCell(options: AmqpCellOptions): Promise<{ record: AmqpRecord; cells: CellRecord[] }> {
  const { runTag, log } = options;
  const vhost = await createVhost(options.amqpUrl, `bench_amqp_${runTag}`);
  options.onCleanup(() => vhost.drop());
  log(`amqp: vhost ${vhost.name} (${vhost.method})`);
  try {
    const serviceDb = await prepareServiceDatabase(options);
    const peer = await createAmqpPeerDatabase(options.adminUrl, `bench_amqp_peer_${runTag}`);
    options.onCleanup(() => peer.drop());
    const probe = await BrokerProbe.open(vhost.url);
    const ctx: Context = { ...options, vhost, probe, serviceDb, peerDb: { url: peer.url, name: `bench_amqp_peer_${runTag}` } };
    const runs: Record<AmqpTarget, AmqpRun[]> = { service: [], 'hand-rolled': [] };
    try {
      for (let i = 0; i < options.repeat; i++) {
        const order: AmqpTarget[] = i % 2 === 0 ? ['service', 'hand-rolled'] : ['hand-rolled', 'service'];
        for (const target of order) runs[target].push(await drainOnce(ctx, target, i + 1));
      }
    } finally {
      await probe.close();
    }
    return summarise(options, vhost, runs);
  } finally {
    await vhost.drop().catch((error: unknown) => log(`amqp: deleting vhost ${vhost.name} failed: ${String(error)}`));
  }
}

/** The service's database: migrated by one start of the service without a broker, then seeded. */
async function prepareServiceDatabase(options: AmqpCellOptions): Promise<{ url: string; name: string }> {
  const name = `bench_amqp_${options.runTag}`;
  const database = await createBenchDatabase(options.adminUrl, name);
  options.onCleanup(() => database.drop());
  const migrating = await options.startService('service-amqp-migrate', database.url, {});
  await migrating.stop();
  await seedBooks(database.url);
  return { url: database.url, name };
}

async function drainOnce(ctx: Context, target: AmqpTarget, round: number): Promise<AmqpRun> {
  const queue = target === 'service' ? SERVICE_QUEUE : PEER_QUEUE;
  const db = target === 'service' ? ctx.serviceDb : ctx.peerDb;
  await checkpoint(db.url);
  const prefix = await queueOrders(
    ctx.vhost.url,
    queue,
    target === 'service' ? SERVICE_QUEUE_ARGUMENTS : {},
    ctx.keys,
    `amqp-${target}`,
    ctx.messages,
  );
  ctx.log(`amqp: ${ctx.messages} messages queued on ${queue}; starting ${target} (round ${round})`);
  const { client, backendPid } = await pollClient(db.url);
  const trace = new CpuTrace(ctx.pgCpu(db.name, new Set([backendPid])));
  const tap = target === 'service' ? await ctx.probe.tap(EVENTS_EXCHANGE, `bench.events-tap.${round}`) : undefined;
  const reservedBefore = await countOf(client, 'SELECT coalesce(sum(reserved), 0) AS n FROM stock_items');
  let consumer: BenchProcess | undefined;
  const spawnedAt = Date.now();
  try {
    const start = (pid: number) => trace.follow(pid);
    consumer =
      target === 'service'
        ? await ctx.startService('service-amqp', db.url, { AMQP_URL: ctx.vhost.url, AMQP_PREFETCH: String(ctx.prefetch) }, start)
        : await ctx.startPeer({ databaseUrl: db.url, amqpUrl: ctx.vhost.url, queue, prefetch: ctx.prefetch }, start);
    const run =
      target === 'service'
        ? await drainService(ctx, client, consumer, trace, prefix, tap!, spawnedAt)
        : await drainPeer(ctx, client, consumer, trace, prefix, spawnedAt);
    const reservedDelta = (await countOf(client, 'SELECT coalesce(sum(reserved), 0) AS n FROM stock_items')) - reservedBefore;
    const queueLeft = await ctx.probe.depth(queue);
    run.check = { ...run.check, reservedDelta, queueLeft };
    run.ok = run.ok && reservedDelta === ctx.messages && queueLeft === 0;
    if (target === 'hand-rolled') {
      await consumer.stop();
      run.peer = peerSummary(consumer.tail());
    }
    logRun(ctx, target, run);
    return run;
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    ctx.log(`FAILED amqp       ${target}: ${message}${consumer ? `\n${consumer.tail()}` : ''}`);
    return failedRun(ctx.messages, message);
  } finally {
    trace.stop();
    await consumer?.stop();
    await ctx.probe.purge(queue);
    if (tap !== undefined) await ctx.probe.deleteQueue(tap);
    await client.end().catch(() => undefined);
  }
}

function alive(consumer: BenchProcess): () => void {
  return () => {
    const { exitCode, signalCode } = consumer.child;
    if (exitCode !== null || signalCode !== null) throw new Error(`${consumer.name} exited (${exitCode ?? signalCode}) during the drain`);
  };
}

/** Until the broker has handed out every message and the inbox holds every one completed. */
async function waitDrained(ctx: Context, client: pg.Client, consumer: BenchProcess, queue: string, consumerName: string, prefix: string) {
  const bound = drainTimeoutMs(ctx.messages);
  const started = Date.now();
  // The broker's depth first: polling it costs PostgreSQL nothing.
  await waitUntil(`${queue} to be empty`, bound, async () => (await ctx.probe.depth(queue)) === 0, alive(consumer));
  await waitUntil(
    `${ctx.messages} completed inbox rows`,
    Math.max(1000, bound - (Date.now() - started)),
    async () => (await inboxWindow(client, consumerName, prefix)).completed >= ctx.messages,
    alive(consumer),
  );
  return inboxWindow(client, consumerName, prefix);
}

function perMessage(ctx: Context, trace: CpuTrace, from: number, to: number): AmqpRun['cpuMsPerMessage'] {
  const cpu = trace.between(from, to);
  const round = (x: number) => Math.round((x / ctx.messages) * 1000) / 1000;
  return { server: round(cpu.node), postgres: cpu.pg === null ? null : round(cpu.pg) };
}

function windowFigures(ctx: Context, w: InboxWindow, spawnedAt: number) {
  const seconds = (w.lastCompletedMs - w.firstReceivedMs) / 1000;
  return {
    messages: ctx.messages,
    windowSeconds: Math.round(seconds * 1000) / 1000,
    messagesPerSec: Math.round((ctx.messages / seconds) * 10) / 10,
    fromSpawnSeconds: Math.round(w.lastCompletedMs - spawnedAt) / 1000,
    meanBatch: w.transactions > 0 ? Math.round((w.rows / w.transactions) * 10) / 10 : 0,
  };
}

async function drainService(
  ctx: Context,
  client: pg.Client,
  consumer: BenchProcess,
  trace: CpuTrace,
  prefix: string,
  tap: string,
  spawnedAt: number,
): Promise<AmqpRun> {
  const w = await waitDrained(ctx, client, consumer, SERVICE_QUEUE, SERVICE_CONSUMER, prefix);
  // The relay's tail: bounded, and not a failure of the drain if it does not catch up (the figure says so).
  const caughtUp = await waitUntil(
    'the relay to publish every event',
    relayTimeoutMs(ctx.messages),
    async () => (await countOf(client, 'SELECT count(*) AS n FROM outbox WHERE published_at IS NULL')) === 0,
    alive(consumer),
  ).then(
    () => true,
    () => false,
  );
  const lastCompleted = new Date(w.lastCompletedMs).toISOString();
  const o = (
    await client.query<Record<string, string | null>>(
      `SELECT count(*) AS events, count(published_at) AS published,
              count(*) FILTER (WHERE occurred_at <= $2 AND (published_at IS NULL OR published_at > $2)) AS pending,
              extract(epoch FROM max(published_at)) * 1000 AS last_published
       FROM outbox WHERE causation_id LIKE $1`,
      [`${prefix}-%`, lastCompleted],
    )
  ).rows[0]!;
  const lastPublishedMs = o.last_published === null ? null : Number(o.last_published);
  const onExchange = await ctx.probe.depth(tap);
  const check = await serviceChecks(client, prefix);
  const events = Number(o.events);
  const published = Number(o.published);
  const end = Math.max(w.lastCompletedMs, lastPublishedMs ?? 0);
  const n = ctx.messages;
  return {
    ...windowFigures(ctx, w, spawnedAt),
    cpuMsPerMessage: perMessage(ctx, trace, w.firstReceivedMs, end),
    cpuWindow: 'first received_at to the last event published',
    peakRssMb: trace.peakRssMb(),
    outbox: {
      events,
      published,
      pendingAtLastCompletion: Number(o.pending),
      relayLagMs: caughtUp && lastPublishedMs !== null ? Math.max(0, Math.round(lastPublishedMs - w.lastCompletedMs)) : null,
      caughtUp,
      onExchange,
    },
    check: { ...check, events, published, onExchange },
    ok:
      check.inboxRows === n &&
      check.inProgress === 0 &&
      check.reservations === n &&
      check.reservedMessages === n &&
      check.deadLetters === 0 &&
      events === n &&
      published === n &&
      onExchange === n,
  };
}

async function serviceChecks(client: pg.Client, prefix: string): Promise<Record<string, number>> {
  const row = (
    await client.query<Record<string, string>>(
      `SELECT (SELECT count(*) FROM inbox WHERE consumer = $2 AND message_id LIKE $1) AS "inboxRows",
              (SELECT count(*) FROM inbox WHERE consumer = $2 AND message_id LIKE $1 AND completed_at IS NULL) AS "inProgress",
              (SELECT count(*) FROM stock_reservations WHERE reserved_by LIKE $1) AS reservations,
              (SELECT count(DISTINCT reserved_by) FROM stock_reservations WHERE reserved_by LIKE $1) AS "reservedMessages",
              (SELECT count(*) FROM dead_letters) AS "deadLetters"`,
      [`${prefix}-%`, SERVICE_CONSUMER],
    )
  ).rows[0]!;
  return Object.fromEntries(Object.entries(row).map(([k, v]) => [k, Number(v)]));
}

async function drainPeer(
  ctx: Context,
  client: pg.Client,
  consumer: BenchProcess,
  trace: CpuTrace,
  prefix: string,
  spawnedAt: number,
): Promise<AmqpRun> {
  const w = await waitDrained(ctx, client, consumer, PEER_QUEUE, PEER_CONSUMER, prefix);
  return {
    ...windowFigures(ctx, w, spawnedAt),
    cpuMsPerMessage: perMessage(ctx, trace, w.firstReceivedMs, w.lastCompletedMs),
    cpuWindow: 'first received_at to the last completed_at',
    peakRssMb: trace.peakRssMb(),
    check: { inboxRows: w.rows, inProgress: w.rows - w.completed },
    ok: w.rows === ctx.messages,
  };
}

/** The peer's own counts, printed as one JSON line when it stops. */
function peerSummary(tail: string): Record<string, number | null> | undefined {
  const line = tail
    .split('\n')
    .reverse()
    .find((l) => l.startsWith('{"amqpPeer"'));
  if (line === undefined) return undefined;
  return (JSON.parse(line) as { amqpPeer: Record<string, number | null> }).amqpPeer;
}

function failedRun(messages: number, error: string): AmqpRun {
  return {
    messages,
    windowSeconds: NaN,
    messagesPerSec: NaN,
    fromSpawnSeconds: NaN,
    meanBatch: NaN,
    cpuMsPerMessage: { server: NaN, postgres: null },
    cpuWindow: '',
    peakRssMb: null,
    check: {},
    ok: false,
    error,
  };
}

function logRun(ctx: Context, target: AmqpTarget, r: AmqpRun): void {
  const o = r.outbox;
  ctx.log(
    `${r.ok ? 'ok    ' : 'FAILED'} amqp       ${target.padEnd(12)} prefetch ${ctx.prefetch} ${r.messagesPerSec.toFixed(0).padStart(6)}/s ` +
      `(${r.messages} drained in ${r.windowSeconds.toFixed(2)} s; ${r.fromSpawnSeconds.toFixed(2)} s from the process's start; ${r.meanBatch} per transaction) ` +
      `cpu/msg ${r.cpuMsPerMessage.server.toFixed(2)}+${r.cpuMsPerMessage.postgres?.toFixed(2) ?? '?'} ms` +
      (o === undefined
        ? ''
        : `; outbox: ${o.pendingAtLastCompletion} pending at the last completion, ` +
          `${o.caughtUp ? `all ${o.published} published ${o.relayLagMs} ms later` : `${o.events - o.published} still unpublished`}, ${o.onExchange} on the exchange`) +
      `; exactly once ${r.ok ? 'holds' : `BROKEN ${JSON.stringify(r.check)}`}`,
  );
}

function summarise(
  options: AmqpCellOptions,
  vhost: Vhost,
  runs: Record<AmqpTarget, AmqpRun[]>,
): { record: AmqpRecord; cells: CellRecord[] } {
  const med = (xs: AmqpRun[], f: (r: AmqpRun) => number | null) => median(xs.map((r) => f(r) ?? NaN));
  const cell = (target: AmqpTarget): CellRecord => {
    const rs = runs[target];
    const pg = med(rs, (r) => r.cpuMsPerMessage.postgres);
    return {
      scenario: 'amqp',
      target,
      concurrency: options.prefetch,
      messagesPerSec: med(rs, (r) => r.messagesPerSec),
      p50Ms: NaN,
      p99Ms: NaN,
      errors: rs.filter((r) => !r.ok).length,
      peakRssMb: rs.some((r) => r.peakRssMb !== null) ? Math.max(...rs.map((r) => r.peakRssMb ?? 0)) : null,
      cpuMsPerMessage: { server: med(rs, (r) => r.cpuMsPerMessage.server), postgres: Number.isFinite(pg) ? pg : null, loadGenerator: NaN },
      ok: rs.every((r) => r.ok),
      runs: rs.map((r) => ({ ...r, p50Ms: NaN, p99Ms: NaN, answered: r.messages })),
    };
  };
  const cells = [cell('service'), cell('hand-rolled')];
  const record: AmqpRecord = {
    messages: options.messages,
    prefetch: options.prefetch,
    repeat: options.repeat,
    vhost: { name: vhost.name, createdWith: vhost.method },
    postgresCpu: options.pgCpuSource,
    service: runs.service,
    handRolled: runs['hand-rolled'],
    ratio: cells[0]!.messagesPerSec / cells[1]!.messagesPerSec,
    ok: cells.every((c) => c.ok),
  };
  return { record, cells };
}
