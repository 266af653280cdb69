/** The HTTP mode: services on one database (PostgreSQL or MariaDB), at-least-once clients and faults, then the invariants; returns the exit code. */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../free-port.js';
import { mulberry32 } from '../seeded-random.js';
import { givenDatabaseUrl, openServer, type RunDatabase } from './database.js';
import { connectionKillLoop, killLoop, overlapsFault, pgRestartLoop, schedule } from './faults.js';
import { httpRequest } from './http-client.js';
import { checkInvariants, runFuzz } from './invariants.js';
import { say, violation, violations } from './log.js';
import { makePlan, type Options } from './plan.js';
import { beginShutdown, cleanupSync, startWatchdog } from './processes.js';
import { between, seededUuid } from './random.js';
import { httpSummary, printHttpReport, stats } from './report.js';
import { ADMIN_TOKEN, Service, serviceEnvironment, type ServicePolicy } from './services.js';
import { Client, restocker, type ClientContext } from './workload.js';

/** HTTP mode services: a start that fails outside a fault is a violation, and a process that dies on its own is one and is restarted. */
function servicePolicy(logDir: string): ServicePolicy {
  return {
    startAttempts: 40,
    stopGraceMs: 5000,
    logDir,
    failedStart(service, attempt) {
      stats.startupFailures++;
      const duringFault = overlapsFault(Date.now() - 60_000, Date.now());
      const lastLines = service.tail.slice(-5).join(' | ');
      if (!duringFault) violation('startup-failure', `service ${service.index} failed to start outside any fault: ${lastLines}`);
      else say(`service ${service.index} failed to start during a fault (attempt ${attempt}); retrying`);
      return 500 + attempt * 250;
    },
    exited(service, exit) {
      // An exit before the process was live is a failed start, which start() itself retries.
      if (!exit.wasUp) return;
      stats.unexpectedExits++;
      const lastLines = service.tail.slice(-8).join(' | ');
      violation(
        'unexpected-exit',
        `service ${service.index} (pid ${exit.pid}) exited on its own: code ${exit.code} signal ${exit.signal}; last output: ${lastLines}`,
      );
      // It must come back, or the clients would only have the other processes.
      void service.start(Date.now() + 120_000).catch((error) => violation('restart-failed', String(error)));
    },
  };
}

export async function runHttp(options: Options): Promise<number> {
  const { seed, keep } = options;
  const plan = makePlan(options.short);
  violations.echoLimit = 50;
  const rng = mulberry32(seed);
  say(
    `torture (${plan.variant}): seed ${seed}, ${plan.processes} processes, ${plan.clients} clients, traffic ${plan.trafficMs / 1000} s, ` +
      `faults: ${plan.kills} kill -9, ${plan.connectionKills} connection kills, ${plan.pgRestarts} PostgreSQL restarts`,
  );

  // The long variant restarts PostgreSQL, so it needs a cluster of its own unless a URL is given (--database-url,
  // TORTURE_DATABASE_URL, TORTURE_POSTGRES_URL); a mysql:// or mariadb:// URL runs it on MariaDB/MySQL.
  const givenUrl = givenDatabaseUrl() ?? (plan.variant === 'short' ? process.env.TEST_POSTGRES_URL : undefined);
  const cluster = await openServer(givenUrl, keep);
  say(`database engine: ${cluster.engine === 'mysql' ? 'MariaDB/MySQL' : 'PostgreSQL'}`);
  if (cluster.server === undefined && plan.pgRestarts > 0) {
    say(`a given server cannot be restarted: skipping the ${plan.pgRestarts} PostgreSQL restarts`);
    plan.pgRestarts = 0;
  }
  if (cluster.engine === 'mysql' && plan.fuzzRuns > 0) {
    say('the HTTP fuzzing runs on PostgreSQL only: skipped on MariaDB/MySQL');
    plan.fuzzRuns = 0;
  }
  const logDir = mkdtempSync(join(tmpdir(), 'torture-logs-'));
  const services: Service[] = [];
  const watchdog = startWatchdog(plan.hardLimitMs, () => process.stdout.write(`${httpSummary(plan, seed, services, undefined)}\n`));

  let database: RunDatabase | undefined;
  let fuzzPassed: boolean | undefined;
  try {
    database = await cluster.createDatabase('torture');
    const { name: dbName, url } = database;
    say(`database ${dbName}; service logs in ${logDir}`);

    const env = serviceEnvironment(['WEBHOOK_'], { DATABASE_URL: url });
    const policy = servicePolicy(logDir);
    for (let i = 0; i < plan.processes; i++) services.push(new Service(i, await freePort(), env, policy));
    // All at once: concurrent start-ups race on the migrations, as a rolling deploy would.
    await Promise.all(services.map((s) => s.start(Date.now() + 90_000)));
    say(`${services.length} service processes up on ports ${services.map((s) => s.port).join(', ')}`);

    const books = Array.from({ length: plan.books }, () => seededUuid(rng));
    for (const [i, bookId] of books.entries()) {
      const onHand = between(rng, plan.initialOnHand[0], plan.initialOnHand[1]);
      const target = services[i % services.length];
      if (target === undefined) throw new Error('no service process to seed the books through');
      const headers = { 'content-type': 'application/json', authorization: `Bearer ${ADMIN_TOKEN}` };
      const body = JSON.stringify({ title: `Torture book ${i}`, onHand });
      const res = await httpRequest(target, 'PUT', `/stock/${bookId}`, headers, body, 10_000);
      if (!res.ok || res.answer.status !== 201) {
        throw new Error(`seeding book ${i} failed: ${res.ok ? `${res.answer.status} ${JSON.stringify(res.answer.body)}` : res.error}`);
      }
    }

    const trafficStart = Date.now();
    const trafficEnd = trafficStart + plan.trafficMs;
    let drainEnd = trafficEnd + plan.drainMs;
    const ctx: ClientContext = { plan, services, books, trafficEnd, drainEnd: () => drainEnd };
    // Faults fall between 5 s after the start and 5 s before the end, so the last one has settled when traffic stops.
    const faultFrom = trafficStart + 5000;
    const faultTo = trafficEnd - 8000;
    const faults = [
      killLoop(services, schedule(rng, plan.kills, faultFrom, faultTo), mulberry32(seed ^ 0x1111), {
        pauseMs: [300, 2500],
        restartWithinMs: 120_000,
        killed(victim, pauseMs) {
          stats.crashes++;
          say(`kill -9 service ${victim.index} (#${stats.crashes}); restarting in ${pauseMs} ms`);
        },
      }),
      connectionKillLoop(cluster, database, schedule(rng, plan.connectionKills, faultFrom, faultTo), mulberry32(seed ^ 0x2222)),
      ...(plan.pgRestarts > 0 && cluster.server !== undefined
        ? [pgRestartLoop(cluster.server, schedule(rng, plan.pgRestarts, faultFrom + 10_000, faultTo - 10_000))]
        : []),
    ];
    const progress = setInterval(
      () => {
        say(
          `progress: ${stats.messages} messages, ${stats.deliveries} deliveries, ${stats.acknowledgements} acks, ${stats.status5xx} 5xx, ` +
            `${stats.crashes} kills, ${stats.connectionKillEvents} connection kills, ${stats.pgRestarts} restarts, ` +
            `${violations.count} violations`,
        );
      },
      plan.variant === 'short' ? 15_000 : 30_000,
    );
    const clients = Array.from({ length: plan.clients }, (_, i) => new Client(i, seed + 1000 * (i + 1), ctx).run());
    const restock = restocker(ctx, mulberry32(seed ^ 0x3333));

    await Promise.all(faults);
    await Promise.all([...clients, restock]);
    drainEnd = Date.now();
    clearInterval(progress);
    say(`traffic over: ${stats.messages} messages, ${stats.acknowledgements} acknowledgements`);

    // Every process must be up again, and every message in, before the database is read.
    for (const s of services) if (!s.up) await s.start(Date.now() + 60_000);
    await checkInvariants(url);

    if (plan.fuzzRuns > 0) fuzzPassed = await runFuzz(plan.fuzzRuns, cluster.adminUrl, Date.now() + 600_000);

    const injected = [
      [stats.crashes, plan.kills, 'kill -9'],
      [stats.connectionKillEvents, plan.connectionKills, 'connection kills'],
      [stats.pgRestarts, plan.pgRestarts, 'PostgreSQL restarts'],
    ] as const;
    for (const [done, planned, what] of injected) {
      if (done < planned) violation('harness', `only ${done} of ${planned} ${what} were injected`);
    }
  } catch (error) {
    violation('harness', `the run failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  } finally {
    beginShutdown();
    await Promise.all(services.map((s) => s.stop().catch(() => {})));
    if (database !== undefined) {
      if (!keep) await cluster.dropDatabase(database);
      else {
        const own = cluster.server === undefined ? '' : ` (cluster ${cluster.server.dir})`;
        say(`kept: database ${database.name} on ${cluster.adminUrl}${own}`);
      }
    }
    cleanupSync();
    clearTimeout(watchdog);
  }

  printHttpReport(plan, seed, services, fuzzPassed);
  // The service logs are for a post-mortem: kept only when there is one to do.
  if (violations.count === 0 && !keep) rmSync(logDir, { recursive: true, force: true });
  else say(`service logs: ${logDir}`);
  return violations.count === 0 ? 0 : 1;
}
