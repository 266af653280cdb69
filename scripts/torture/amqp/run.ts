/**
 * The AMQP mode (`npm run torture -- --amqp [--short]`): commands in through RabbitMQ, events out through the outbox,
 * under faults. A producer publishes N orders to the order-placed queue, many of them twice or more (same message
 * id) and some again under a new message id (a producer duplicate); the service processes are killed with kill -9
 * several times and the RabbitMQ node is restarted once while the traffic runs. At the end, read from the database
 * and the events that came out:
 *   - every order is reserved exactly once (one reservation row, the right quantity, stock counts agree);
 *   - every reservation's stock-reserved event was published at least once (its id as message-id);
 *   - distinct stock-reserved event ids equal reservations (no event for a duplicate);
 *   - nothing is left pending in the outbox or in the command queue, and nothing was dead-lettered.
 *
 * The broker is a throwaway node of this run's own (scripts/rabbitmq-throwaway.sh), so restarting it
 * disturbs nobody; the database is --database-url / TORTURE_DATABASE_URL / TORTURE_POSTGRES_URL (mysql:// or mariadb://
 * for MariaDB/MySQL) / TEST_POSTGRES_URL, or a throwaway PostgreSQL cluster.
 * Options: --short (the CI variant), --seed N, TORTURE_AMQP_ORDERS, TORTURE_TRAFFIC_S, --keep.
 * Traffic stays on 127.0.0.1; every loop is bounded in count and time; everything started is stopped.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { STOCK_RESERVED } from '../../../src/inventory/stock-events.js';
import { freePort } from '../../free-port.js';
import { mulberry32 } from '../../seeded-random.js';
import { givenDatabaseUrl, openServer, withRows } from '../database.js';
import { brokerRestart, killLoop } from '../faults.js';
import { say, violation, violations } from '../log.js';
import { makeAmqpPlan, type Options } from '../plan.js';
import { beginShutdown, cleanupSync, startWatchdog, ThrowawayServer } from '../processes.js';
import { amqpStats, printAmqpReport } from '../report.js';
import { ADMIN_TOKEN, Service, serviceEnvironment, type ServicePolicy } from '../services.js';
import { ClientConnection, EventTap } from './broker.js';
import { checkInvariants } from './invariants.js';
import { ORDER_QUEUE, planCopies, planOrders, publishAll } from './producer.js';

/** AMQP mode services: any exit this run did not cause is a violation, with the first error line the process printed. */
const servicePolicy: ServicePolicy = {
  startAttempts: 10,
  stopGraceMs: 15_000,
  failedStart(service, attempt) {
    say(`service ${service.index} did not start (attempt ${attempt}); retrying`);
    return 500;
  },
  exited(service, exit) {
    amqpStats.unexpectedExits++;
    // The first error or fatal line says why; the last lines say how it ended.
    const cause = service.tail.find((l) => /"level":(50|60)/.test(l)) ?? '';
    const lastLines = service.tail.slice(-3).join(' | ');
    const how = `code ${exit.code}, signal ${exit.signal}`;
    violation('unexpected-exit', `service ${service.index} exited on its own (${how}): ${cause} | … | ${lastLines}`);
  },
};

export async function runAmqp(options: Options): Promise<number> {
  const { seed, keep } = options;
  const plan = makeAmqpPlan(options.short);
  const rng = mulberry32(seed);
  say(
    `torture AMQP (${plan.variant}): seed ${seed}, ${plan.processes} processes, ${plan.orders} orders over ${plan.trafficMs / 1000} s, ` +
      `faults: ${plan.kills} kill -9, ${plan.brokerRestarts} RabbitMQ restart`,
  );
  const watchdog = startWatchdog(plan.hardLimitMs, () => printAmqpReport(plan, seed));

  const broker = new ThrowawayServer('rabbitmq-throwaway.sh', 'torture-rmq-', keep);
  const amqpUrl = await broker.start();
  say(`throwaway RabbitMQ node at ${amqpUrl}`);
  const cluster = await openServer(givenDatabaseUrl() ?? process.env.TEST_POSTGRES_URL, keep);
  say(`database engine: ${cluster.engine === 'mysql' ? 'MariaDB/MySQL' : 'PostgreSQL'}`);
  const database = await cluster.createDatabase('torture_amqp');

  const services: Service[] = [];
  const producer = new ClientConnection(amqpUrl, async () => {});
  const tap = new EventTap(amqpUrl);
  try {
    await tap.ready(Date.now() + 30_000);
    const env = serviceEnvironment(['WEBHOOK_', 'AMQP_', 'OUTBOX_'], {
      DATABASE_URL: database.url,
      AMQP_URL: amqpUrl,
      AMQP_PREFETCH: '16',
      AMQP_RETRY_DELAY_MS: '200',
      AMQP_RETRY_MAX_DELAY_MS: '2000',
      OUTBOX_RELAY_INTERVAL_MS: '200',
      OUTBOX_RELAY_MAX_BACKOFF_MS: '2000',
      SHUTDOWN_GRACE_MS: '5000',
    });
    for (let i = 0; i < plan.processes; i++) services.push(new Service(i, await freePort(), env, servicePolicy));
    for (const s of services) await s.start();
    say(`${services.length} service processes up`);

    // Books with far more stock than the orders can take: every order must end up reserved.
    const books = Array.from({ length: plan.books }, () => randomUUID());
    const seeder = services[0];
    if (seeder === undefined) throw new Error('no service process to seed the books through');
    for (const bookId of books) {
      const res = await fetch(`${seeder.baseUrl}/stock/${bookId}`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${ADMIN_TOKEN}` },
        body: JSON.stringify({ title: 'Torture book', onHand: plan.orders * 3 }),
        signal: AbortSignal.timeout(10_000),
      });
      if (res.status !== 201) throw new Error(`seeding failed: ${res.status} ${await res.text()}`);
    }

    const orders = planOrders(plan, books, rng);
    const trafficStart = Date.now();
    const publishDeadline = trafficStart + plan.trafficMs + plan.drainMs;

    // Faults at random moments inside the traffic window; the broker restart near the middle.
    const killTimes = Array.from({ length: plan.kills }, () => trafficStart + 3000 + rng() * (plan.trafficMs - 8000)).sort((a, b) => a - b);
    const restartAt = trafficStart + plan.trafficMs * (0.35 + rng() * 0.2);
    const copies = planCopies(orders, rng, trafficStart, plan.trafficMs);
    amqpStats.orders = orders.length;
    const faults = [
      killLoop(services, killTimes, rng, {
        pauseMs: [300, 1500],
        restartWithinMs: Number.POSITIVE_INFINITY,
        killed(victim) {
          amqpStats.crashes++;
          say(`kill -9 service ${victim.index}`);
        },
      }),
      brokerRestart(broker, restartAt),
    ];

    await publishAll(producer, copies, publishDeadline);
    say(`producer done: ${amqpStats.publishes} confirmed publishes (${amqpStats.publishRetries} retries)`);
    await Promise.all(faults);

    // Drain: every order in, every event out, or the deadline.
    await withRows(database.url, async (db) => {
      const drainDeadline = Date.now() + plan.drainMs;
      let state = { reservations: 0, pending: -1, queue: -1, events: 0 };
      while (Date.now() < drainDeadline) {
        const reservations = await db.count('stock_reservations');
        const pending = await db.count('outbox where published_at is null');
        const channel = await producer.ensure(drainDeadline).catch(() => undefined);
        const queue = channel === undefined ? -1 : (await channel.checkQueue(ORDER_QUEUE).catch(() => ({ messageCount: -1 }))).messageCount;
        state = { reservations, pending, queue, events: tap.distinct(STOCK_RESERVED) };
        if (state.reservations === orders.length && state.pending === 0 && state.queue === 0 && state.events >= orders.length) break;
        await sleep(500);
      }
      say(`drained: ${JSON.stringify(state)}`);
      await sleep(1000); // late repeats of an event, if any, are counted too
      await checkInvariants(db, orders, tap.received);
    });
  } catch (error) {
    violation('harness', `the run failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  } finally {
    beginShutdown();
    await Promise.all(services.map((s) => s.stop().catch(() => {})));
    await producer.close();
    await tap.stop();
    if (!keep) await cluster.dropDatabase(database);
    else say(`kept: database ${database.name}, RabbitMQ node in ${broker.dir}`);
    cleanupSync();
    clearTimeout(watchdog);
  }
  printAmqpReport(plan, seed);
  return violations.count === 0 ? 0 : 1;
}
