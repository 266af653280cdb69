/**
 * The failover mode (`npm run torture -- --failover [--short] [--async]`): exactly-once across a database
 * failover and a broker node's loss. The servers are this run's own (./lab.ts): etcd, a Patroni pair of
 * PostgreSQL 15 (synchronous_mode, or with --async an asynchronous standby), haproxy routing to the leader,
 * a three-node RabbitMQ cluster with the command queues as quorum queues.
 *
 * Load, with duplicates: the HTTP mode's at-least-once clients (../workload.ts) on two service processes,
 * and the AMQP mode's producer (../amqp/producer.ts) on two more, each pair with a database of its own.
 * The service processes keep running throughout; each round of faults, spread over the traffic:
 *   1. kill -9 of the PostgreSQL primary's postmaster: Patroni promotes the standby at once;
 *   2. once the old primary is back as a standby, kill -9 of the new primary's Patroni: its PostgreSQL runs
 *      on as an orphan until the leader key expires and the standby is promoted; the killed Patroni is
 *      then started again and rewinds its node into a standby;
 *   3. kill -9 of the RabbitMQ node that leads the order-placed queue, started again after a pause.
 * For each kill the run reports how long until commands succeeded again: an HTTP command acknowledged that
 * was sent after the kill, an AMQP command committed after it (the inbox's completed_at).
 *
 * Then the invariants of the other modes: every acknowledged HTTP command applied exactly once as
 * acknowledged (stock, reservations, one inbox row per key, none left in progress), every AMQP order
 * reserved exactly once, every reservation's event published at least once with distinct ids, nothing
 * dead-lettered (table or broker). With --async the run also counts acknowledged commands whose effects
 * vanished; it exits 0 when its only violations are such losses, which it reports as its figures.
 * Everything is on 127.0.0.1, every wait bounded, everything started is stopped at the end.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { STOCK_RESERVED } from '../../../src/inventory/stock-events.js';
import { RESERVE_STOCK } from '../../../src/inventory/order.commands.js';
import { freePort } from '../../free-port.js';
import { mulberry32 } from '../../seeded-random.js';
import { ClientConnection, EventTap } from '../amqp/broker.js';
import { checkInvariants as checkAmqpInvariants } from '../amqp/invariants.js';
import { ORDER_QUEUE, planCopies, planOrders, publishAll, type Order } from '../amqp/producer.js';
import { openFault } from '../faults.js';
import { httpRequest } from '../http-client.js';
import { checkInvariants as checkHttpInvariants } from '../invariants.js';
import { describeError, say, violation, violations } from '../log.js';
import { allMessages } from '../messages.js';
import { makeFailoverPlan, makePlan, type FailoverPlan, type Options } from '../plan.js';
import { count, createDatabase, postgresRows, withClient, type Cluster, type Database } from '../postgres.js';
import { beginShutdown, cleanupSync, startWatchdog } from '../processes.js';
import { between, seededUuid } from '../random.js';
import { amqpStats, stats } from '../report.js';
import { ADMIN_TOKEN, Service, serviceEnvironment, type ServicePolicy } from '../services.js';
import { ackObservers, Client, restocker, type ClientContext } from '../workload.js';
import { FailoverLab, type PostgresNode } from './lab.js';

const QUORUM = { 'x-queue-type': 'quorum' };
const DEAD_LETTER_QUEUE = 'inventory.dead-letter';
/** Violations an asynchronous standby is expected to cause: an acknowledged command whose effect vanished, or applied again. */
const LOSS_KINDS = new Set([
  'inbox-row-count',
  'model',
  'recorded-outcome',
  'reserve-effect',
  'release-effect',
  'processed-twice',
  'double-reservation',
  'replay-differs',
  'wrong-outcome',
  'reserved-exactly-once',
  'reservations',
  'orphan-reservation',
  'orphan-release',
  'reserved-sum',
  'distinct-events',
  'event-published',
  'stock-bounds',
]);

interface KillRecord {
  what: string;
  at: number;
  /** When the cluster was whole again (or the broker node back). */
  settledAt?: number;
  /** Patroni promoted another node / the leader changed. */
  promotedAfterMs?: number;
  httpRecoveryMs?: number;
  /** The first HTTP command sent after the kill that was processed (201), in ms after the kill. */
  httpFirstMs?: number;
  amqpRecoveryMs?: number;
}

const kills: KillRecord[] = [];
/** When each HTTP command was answered 201. */
const processedAt: number[] = [];
const figures = { lostHttp: 0, lostAmqp: 0, appliedTwice: 0, readyDetail: '' as string | undefined, brokerDeadLetters: 0 };

function servicePolicy(logDir: string): ServicePolicy {
  return {
    startAttempts: 10,
    stopGraceMs: 10_000,
    logDir,
    failedStart(service, attempt) {
      say(`service ${service.index} did not start (attempt ${attempt}); retrying`);
      return 1000;
    },
    exited(service, exit) {
      stats.unexpectedExits++;
      const lastLines = service.tail.slice(-6).join(' | ');
      violation('unexpected-exit', `service ${service.index} exited on its own (code ${exit.code}, signal ${exit.signal}): ${lastLines}`);
    },
  };
}

async function seedBook(service: Service, bookId: string, title: string, onHand: number): Promise<void> {
  const headers = { 'content-type': 'application/json', authorization: `Bearer ${ADMIN_TOKEN}` };
  const res = await httpRequest(service, 'PUT', `/stock/${bookId}`, headers, JSON.stringify({ title, onHand }), 10_000);
  if (!res.ok || res.answer.status !== 201) {
    throw new Error(`seeding ${bookId} failed: ${res.ok ? `${res.answer.status} ${JSON.stringify(res.answer.body)}` : res.error}`);
  }
}

/** When each command of a database committed (the inbox's completed_at), in ms since the epoch, sorted. */
async function commitTimes(url: string): Promise<number[]> {
  return withClient(url, async (c) => {
    const { rows } = await c.query<{ t: number }>(
      'select (extract(epoch from completed_at) * 1000)::float8 as t from inbox where completed_at is not null order by completed_at',
    );
    return rows.map((r) => Number(r.t));
  });
}

/**
 * Commands processed at `times` (sorted or not): how long after the kill at `at` they were processed
 * again, i.e. the end of the longest stretch without any in [at, end] (a kill that stopped nothing: the
 * first one after it). Undefined when none came at all before `end`.
 */
function recoveredAfter(times: readonly number[], at: number, end: number): number | undefined {
  const inside = times.filter((t) => t >= at && t <= end).sort((a, b) => a - b);
  if (inside.length === 0) return undefined;
  let previous = at;
  let longest = { gap: -1, until: at };
  for (const t of inside) {
    if (t - previous > longest.gap) longest = { gap: t - previous, until: t };
    previous = t;
  }
  return longest.until - at;
}

async function sleepUntil(at: number): Promise<void> {
  const wait = at - Date.now();
  if (wait > 0) await sleep(wait);
}

/** One round: the primary's postmaster, then the new primary's Patroni, then a RabbitMQ node. */
async function faultRound(lab: FailoverLab, times: readonly [number, number, number], standbyLagMs: number): Promise<void> {
  // 1. kill -9 of the PostgreSQL primary (with --lag: while the standby has fallen that far behind).
  await sleepUntil(times[0]);
  const primary = await lab.leader();
  if (primary === undefined) throw new Error('no PostgreSQL leader to kill');
  let fault = openFault('postgres primary kill');
  const standby = lab.nodes.find((n) => n !== primary)!;
  const receiver = standbyLagMs > 0 ? await lab.walReceiverPid(standby) : undefined;
  if (receiver !== undefined) {
    // A standby that lags (a slow disk or network): its WAL receiver stopped, the primary goes on committing.
    process.kill(receiver, 'SIGSTOP');
    say(`${standby.name}'s WAL receiver stopped for ${standbyLagMs} ms before the kill`);
    await sleep(standbyLagMs);
  } else if (standbyLagMs > 0) {
    violation('harness', `no WAL receiver on ${standby.name} to stop`);
  }
  const pgKill: KillRecord = { what: `kill -9 PostgreSQL primary (${primary.name})`, at: Date.now() };
  if (!lab.killPostgres(primary)) throw new Error(`${primary.name} has no running postmaster`);
  // What the stopped receiver had not read yet (in its socket's buffer) is lost with the primary, as over a
  // network that drops it: the receiver is killed, and the standby's postmaster restarts it from its own WAL.
  if (receiver !== undefined) process.kill(receiver, 'SIGKILL');
  kills.push(pgKill);
  say(`${pgKill.what}`);
  const promoted = await waitForLeader(lab, primary);
  pgKill.promotedAfterMs = Date.now() - pgKill.at;
  say(`Patroni promoted ${promoted.name} after ${(pgKill.promotedAfterMs / 1000).toFixed(1)} s`);
  await lab.waitHealthy(180_000);
  pgKill.settledAt = Date.now();
  fault.close();
  say(`${primary.name} is back as a standby after ${((pgKill.settledAt - pgKill.at) / 1000).toFixed(1)} s`);

  // 2. kill -9 of the new primary's Patroni; its PostgreSQL runs on without it.
  await sleepUntil(times[1]);
  const leader = await lab.leader();
  if (leader === undefined) throw new Error('no PostgreSQL leader whose Patroni to kill');
  const patroniKill: KillRecord = { what: `kill -9 Patroni of the primary (${leader.name})`, at: Date.now() };
  fault = openFault('patroni kill');
  lab.killPatroni(leader);
  kills.push(patroniKill);
  say(patroniKill.what);
  const successor = await waitForLeader(lab, leader);
  patroniKill.promotedAfterMs = Date.now() - patroniKill.at;
  say(
    `Patroni promoted ${successor.name} after ${(patroniKill.promotedAfterMs / 1000).toFixed(1)} s; starting ${leader.name}'s Patroni again`,
  );
  lab.startPatroni(leader);
  await lab.waitHealthy(180_000);
  patroniKill.settledAt = Date.now();
  fault.close();
  say(`${leader.name} rejoined as a standby after ${((patroniKill.settledAt - patroniKill.at) / 1000).toFixed(1)} s`);

  // 3. kill -9 of the RabbitMQ node leading the order-placed queue (another one if that cannot be told).
  await sleepUntil(times[2]);
  const victim = (await lab.queueLeader(ORDER_QUEUE)) ?? lab.rabbits[1]!;
  const index = lab.rabbits.indexOf(victim);
  const brokerKill: KillRecord = { what: `kill -9 RabbitMQ node ${index} (leader of ${ORDER_QUEUE})`, at: Date.now() };
  fault = openFault('rabbitmq node kill');
  await victim.kill();
  kills.push(brokerKill);
  say(brokerKill.what);
  await sleep(8000);
  await victim.restart();
  brokerKill.settledAt = Date.now();
  fault.close();
  say(`RabbitMQ node ${index} is back after ${((brokerKill.settledAt - brokerKill.at) / 1000).toFixed(1)} s`);
}

async function waitForLeader(lab: FailoverLab, old: PostgresNode): Promise<PostgresNode> {
  const deadline = Date.now() + 120_000;
  while (Date.now() < deadline) {
    const leader = await lab.leader();
    if (leader !== undefined && leader !== old) return leader;
    await sleep(100);
  }
  throw new Error(`no node other than ${old.name} became the leader within 120 s`);
}

/** Acknowledged HTTP commands whose inbox row is gone, and AMQP orders never reserved: what a failover lost. */
async function countLosses(httpUrl: string, amqpUrl: string, orders: readonly Order[]): Promise<void> {
  await withClient(httpUrl, async (c) => {
    const keys = new Set((await c.query<{ k: string }>("select consumer || ' ' || message_id as k from inbox")).rows.map((r) => r.k));
    figures.lostHttp = allMessages.filter((m) => m.acks.length > 0 && !keys.has(`${m.consumer} ${m.key}`)).length;
  });
  figures.appliedTwice = allMessages.filter((m) => m.acks.filter((a) => a.httpStatus === 201).length > 1).length;
  await withClient(amqpUrl, async (c) => {
    const reserved = new Set((await c.query<{ o: string }>('select order_id as o from stock_reservations')).rows.map((r) => r.o));
    figures.lostAmqp = orders.filter((o) => !reserved.has(o.orderId)).length;
  });
}

export async function runFailover(options: Options): Promise<number> {
  const { seed, keep } = options;
  const synchronous = !options.asynchronous;
  const plan = makeFailoverPlan(options.short, options.standbyLagMs);
  violations.echoLimit = 50;
  const rng = mulberry32(seed);
  say(
    `torture failover (${plan.variant}, ${synchronous ? 'synchronous' : 'asynchronous'} replication): seed ${seed}, ` +
      `${plan.httpProcesses} HTTP + ${plan.amqpProcesses} AMQP service processes, ${plan.clients} clients, ${plan.orders} AMQP orders, ` +
      `traffic ${plan.trafficMs / 1000} s, ${plan.rounds} round(s) of: kill -9 primary${plan.standbyLagMs > 0 ? ` (its standby ${plan.standbyLagMs} ms behind)` : ''}, kill -9 its successor's Patroni, kill -9 a RabbitMQ node`,
  );
  const watchdog = startWatchdog(plan.hardLimitMs, () => printReport(plan, seed, synchronous));
  const lab = new FailoverLab(synchronous, keep);
  const logDir = mkdtempSync(join(tmpdir(), 'torture-fo-logs-'));
  const services: Service[] = [];
  let tap: EventTap | undefined;
  let producerConnection: ClientConnection | undefined;
  try {
    await lab.start();
    const cluster: Cluster = { adminUrl: lab.pgUrl, server: undefined };
    const httpDb: Database = await createDatabase(cluster, 'torture_fo_http');
    const amqpDb: Database = await createDatabase(cluster, 'torture_fo_amqp');
    say(`databases ${httpDb.name}, ${amqpDb.name}; service logs in ${logDir}`);

    tap = new EventTap(lab.amqpUrl, QUORUM);
    await tap.ready(Date.now() + 60_000);
    producerConnection = new ClientConnection(lab.amqpUrl, async () => {});

    const policy = servicePolicy(logDir);
    const httpEnv = serviceEnvironment(['WEBHOOK_', 'AMQP_'], { DATABASE_URL: httpDb.url });
    const amqpEnv = serviceEnvironment(['WEBHOOK_', 'AMQP_', 'OUTBOX_'], {
      DATABASE_URL: amqpDb.url,
      AMQP_URL: lab.amqpUrl,
      AMQP_QUEUE_TYPE: 'quorum',
      AMQP_PREFETCH: '16',
      AMQP_RETRY_DELAY_MS: '200',
      AMQP_RETRY_MAX_DELAY_MS: '2000',
      OUTBOX_RELAY_INTERVAL_MS: '200',
      OUTBOX_RELAY_MAX_BACKOFF_MS: '2000',
    });
    const httpServices: Service[] = [];
    for (let i = 0; i < plan.httpProcesses; i++) httpServices.push(new Service(i, await freePort(), httpEnv, policy));
    const amqpServices: Service[] = [];
    for (let i = 0; i < plan.amqpProcesses; i++) amqpServices.push(new Service(plan.httpProcesses + i, await freePort(), amqpEnv, policy));
    services.push(...httpServices, ...amqpServices);
    await Promise.all(services.map((s) => s.start(Date.now() + 120_000)));
    say(`${services.length} service processes up`);

    // What the service says of the replication it runs on: a warning (in the ready probe's detail) only when asynchronous.
    const ready = await httpRequest(httpServices[0]!, 'GET', '/health/ready', {}, undefined, 10_000);
    figures.readyDetail = ready.ok ? (ready.answer.body as { detail?: string }).detail : undefined;
    say(`/health/ready: ${ready.ok ? `${ready.answer.status} ${JSON.stringify(ready.answer.body)}` : ready.error}`);
    if (synchronous && figures.readyDetail !== undefined)
      violation('replication-warning', `warned under synchronous replication: ${figures.readyDetail}`);
    if (!synchronous && figures.readyDetail === undefined) violation('replication-warning', 'no warning with an asynchronous standby');

    // Books: the HTTP clients' with little stock (so stock runs short), the AMQP orders' with plenty.
    const httpPlan = { ...makePlan(options.short), clients: plan.clients, processes: plan.httpProcesses, books: plan.books };
    const httpBooks = Array.from({ length: plan.books }, () => seededUuid(rng));
    for (const [i, bookId] of httpBooks.entries()) {
      await seedBook(httpServices[i % httpServices.length]!, bookId, `Torture book ${i}`, between(rng, 15, 40));
    }
    const amqpBooks = Array.from({ length: plan.books }, () => randomUUID());
    for (const bookId of amqpBooks) await seedBook(amqpServices[0]!, bookId, 'Torture book', plan.orders * 3);

    const trafficStart = Date.now();
    const trafficEnd = trafficStart + plan.trafficMs;
    let drainEnd = trafficEnd + plan.drainMs;
    const ctx: ClientContext = { plan: httpPlan, services: httpServices, books: httpBooks, trafficEnd, drainEnd: () => drainEnd };

    // Recovery: when HTTP commands were processed (201: the database took the command; a 200 may come from the cache).
    ackObservers.push((sentAt, answeredAt, status) => {
      if (status !== 201) return;
      processedAt.push(answeredAt);
      for (const k of kills) if (sentAt >= k.at && k.httpFirstMs === undefined) k.httpFirstMs = answeredAt - k.at;
    });

    const orders = planOrders(makePlanForOrders(plan), amqpBooks, rng);
    amqpStats.orders = orders.length;
    const copies = planCopies(orders, rng, trafficStart, plan.trafficMs);

    // Rounds spread over the traffic, each kill of a round at least 25 s after the previous one settled.
    const roundMs = (plan.trafficMs - 20_000) / plan.rounds;
    const faults = (async () => {
      for (let r = 0; r < plan.rounds; r++) {
        const start = trafficStart + 8000 + r * roundMs;
        await faultRound(lab, [start, start + roundMs * 0.35, start + roundMs * 0.7], plan.standbyLagMs);
      }
    })().catch((error: unknown) => violation('harness', `a fault failed: ${describeError(error)}`));

    const progress = setInterval(() => {
      say(
        `progress: ${stats.messages} HTTP messages, ${stats.acknowledgements} acks, ${stats.status5xx} 5xx; ` +
          `${amqpStats.publishes} AMQP publishes confirmed; ${violations.count} violations`,
      );
    }, 20_000);
    const clients = Array.from({ length: plan.clients }, (_, i) => new Client(i, seed + 1000 * (i + 1), ctx).run());
    const restock = restocker(ctx, mulberry32(seed ^ 0x3333));
    const publishing = publishAll(producerConnection, copies, trafficEnd + plan.drainMs);

    await faults;
    await Promise.all([...clients, restock]);
    drainEnd = Date.now();
    await publishing;
    clearInterval(progress);
    say(`traffic over: ${stats.messages} HTTP messages, ${stats.acknowledgements} acks; ${amqpStats.publishes} AMQP publishes confirmed`);

    // Drain the AMQP side: every order in, every event out, or the deadline.
    await withClient(amqpDb.url, async (db) => {
      const deadline = Date.now() + plan.drainMs;
      let state = { reservations: 0, pending: -1, queue: -1, events: 0 };
      while (Date.now() < deadline) {
        const channel = await producerConnection!.ensure(deadline).catch(() => undefined);
        const queue = channel === undefined ? -1 : (await channel.checkQueue(ORDER_QUEUE).catch(() => ({ messageCount: -1 }))).messageCount;
        state = {
          reservations: await count(db, 'stock_reservations'),
          pending: await count(db, 'outbox where published_at is null'),
          queue,
          events: tap!.distinct(STOCK_RESERVED),
        };
        if (state.queue === 0 && state.pending === 0 && state.events >= state.reservations && state.reservations >= orders.length) break;
        // Under asynchronous replication some orders may be gone for good: stop once nothing is left to do.
        if (!synchronous && state.queue === 0 && state.pending === 0 && state.events >= state.reservations) break;
        await sleep(500);
      }
      say(`AMQP drained: ${JSON.stringify(state)}`);
      await sleep(1000);
      const channel = await producerConnection!.ensure(Date.now() + 10_000);
      figures.brokerDeadLetters = (await channel.checkQueue(DEAD_LETTER_QUEUE)).messageCount;
      if (figures.brokerDeadLetters > 0)
        violation('dead-letters', `${figures.brokerDeadLetters} messages on the broker's ${DEAD_LETTER_QUEUE} queue`);
      await checkAmqpInvariants(postgresRows(db), orders, tap!.received);
    });

    const amqpCommits = await commitTimes(amqpDb.url);
    for (const k of kills) {
      const end = (k.settledAt ?? k.at) + 5000;
      k.httpRecoveryMs = recoveredAfter(processedAt, k.at, end);
      k.amqpRecoveryMs = recoveredAfter(amqpCommits, k.at, end);
    }
    await checkHttpInvariants(httpDb.url);
    await countLosses(httpDb.url, amqpDb.url, orders);
    const inboxIds = await withClient(amqpDb.url, (c) => count(c, `inbox where consumer = '${RESERVE_STOCK}'`));
    say(`AMQP inbox rows: ${inboxIds}; HTTP messages sent: ${allMessages.length}`);
    if (kills.length < plan.rounds * 3) violation('harness', `only ${kills.length} of ${plan.rounds * 3} kills were injected`);
  } catch (error) {
    violation('harness', `the run failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  } finally {
    beginShutdown();
    await Promise.all(services.map((s) => s.stop().catch(() => {})));
    await producerConnection?.close();
    await tap?.stop();
    await lab.stop().catch(() => {});
    if (keep) say(`kept: the lab in ${lab.dir}`);
    cleanupSync();
    clearTimeout(watchdog);
  }
  printReport(plan, seed, synchronous);
  const unexpected = violations.all.filter((v) => synchronous || !LOSS_KINDS.has(v.kind));
  if (unexpected.length === 0 && !keep) rmSync(logDir, { recursive: true, force: true });
  else say(`service logs: ${logDir}`);
  return unexpected.length === 0 ? 0 : 1;
}

/** The AMQP producer's plan fields, from the failover plan. */
function makePlanForOrders(plan: FailoverPlan): Parameters<typeof planOrders>[0] {
  return {
    variant: plan.variant,
    processes: plan.amqpProcesses,
    orders: plan.orders,
    trafficMs: plan.trafficMs,
    kills: 0,
    brokerRestarts: 0,
    books: plan.books,
    drainMs: plan.drainMs,
    hardLimitMs: plan.hardLimitMs,
  };
}

function seconds(ms: number | undefined): string {
  return ms === undefined ? 'never' : `${(ms / 1000).toFixed(1)} s`;
}

function printReport(plan: FailoverPlan, seed: number, synchronous: boolean): void {
  const kinds = new Map<string, number>();
  for (const v of violations.all) kinds.set(v.kind, (kinds.get(v.kind) ?? 0) + 1);
  const lines = [
    `== torture summary (failover, ${plan.variant} variant, ${synchronous ? 'synchronous' : 'asynchronous'} replication, ` +
      `${plan.standbyLagMs > 0 ? `standby ${plan.standbyLagMs} ms behind at each primary kill, ` : ''}seed ${seed})`,
    `traffic:                 ${plan.trafficMs / 1000} s; ${plan.httpProcesses} HTTP + ${plan.amqpProcesses} AMQP service processes, never restarted`,
    `HTTP messages:           ${stats.messages} (deliveries ${stats.deliveries}, duplicates ${stats.duplicates}, producer duplicates ${stats.producerDuplicates})`,
    `HTTP acknowledgements:   ${stats.acknowledgements} (201 ${stats.processed201}, 200 replayed ${stats.replayed200}); 5xx ${stats.status5xx} ` +
      `(during faults ${stats.status5xxDuringFaults}), network errors ${stats.networkErrors}`,
    `AMQP orders:             ${amqpStats.orders} (confirmed publishes ${amqpStats.publishes}, same-id copies ${amqpStats.duplicatePublishes}, ` +
      `new-id duplicates ${amqpStats.producerDuplicates}, retries ${amqpStats.publishRetries}); events ${amqpStats.eventsReceived} (${amqpStats.eventRedeliveries} repeats)`,
    `ready probe detail:      ${figures.readyDetail ?? '(none)'}`,
    'kills (promoted: Patroni made another node the leader; HTTP, AMQP: commands processed again, the end of the longest stretch',
    '  without any from the kill until 5 s after the cluster was whole; first sent after it: the first HTTP command sent after the kill that got a 201):',
    ...kills.map(
      (k) =>
        `  ${k.what.padEnd(58)} promoted ${seconds(k.promotedAfterMs).padStart(7)}, HTTP ${seconds(k.httpRecoveryMs).padStart(7)} ` +
        `(first sent after it ${seconds(k.httpFirstMs)}), ` +
        `AMQP ${seconds(k.amqpRecoveryMs).padStart(7)}, whole again ${seconds(k.settledAt === undefined ? undefined : k.settledAt - k.at).padStart(7)}`,
    ),
    `acknowledged but lost:   HTTP ${figures.lostHttp}, AMQP orders never reserved ${figures.lostAmqp}; HTTP commands answered 201 twice ${figures.appliedTwice}`,
    `broker dead letters:     ${figures.brokerDeadLetters}`,
    `unexpected exits:        ${stats.unexpectedExits}`,
    `invariant violations:    ${violations.count}`,
  ];
  if (kinds.size > 0) lines.push(`violations by kind: ${[...kinds.entries()].map(([k, n]) => `${k} ${n}`).join(', ')}`);
  lines.push(...violations.all.slice(0, 25).map((v) => `  ${v.kind}: ${v.detail.slice(0, 400)}`));
  process.stdout.write(`\n${lines.join('\n')}\n`);
  const record = {
    mode: 'failover',
    variant: plan.variant,
    replication: synchronous ? 'synchronous' : 'asynchronous',
    standbyLagMs: plan.standbyLagMs,
    seed,
    kills: kills.map((k) => ({
      what: k.what,
      promotedMs: k.promotedAfterMs,
      httpRecoveryMs: k.httpRecoveryMs,
      httpFirstMs: k.httpFirstMs,
      amqpRecoveryMs: k.amqpRecoveryMs,
    })),
    httpAcknowledgements: stats.acknowledgements,
    amqpOrders: amqpStats.orders,
    ...figures,
    unexpectedExits: stats.unexpectedExits,
    violations: violations.count,
  };
  process.stdout.write(`TORTURE_RESULT ${JSON.stringify(record)}\n`);
}
