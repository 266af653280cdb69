/**
 * Torture run CLI: several service processes on one PostgreSQL or MariaDB, many at-least-once clients, and
 * faults injected at random moments (kill -9 of a service, the end of its database connections by
 * pg_terminate_backend or KILL CONNECTION, a fast PostgreSQL restart). At the end the invariants are read
 * from the database; any violation exits 1.
 *
 *   npm run torture                 the long variant (>= 10 min, >= 20 of each service fault)
 *   npm run torture -- --short      the CI variant (under 3 min, a few of each fault, no PostgreSQL restart)
 *   npm run torture -- --amqp [--short]   commands over RabbitMQ, events out through the outbox, kill -9 and a
 *                                   RabbitMQ restart (scripts/torture/amqp/run.ts)
 *   npm run torture -- --failover [--short] [--async]   HTTP and AMQP load on a Patroni pair behind haproxy and a
 *                                   three-node RabbitMQ cluster (quorum queues): kill -9 of the PostgreSQL primary,
 *                                   of its successor's Patroni, of a RabbitMQ node (scripts/torture/failover/run.ts);
 *                                   --async: the standby replicates asynchronously, and the run counts what it lost;
 *                                   --lag MS: before each primary kill the standby's WAL receiver is stopped MS ms,
 *                                   and killed with the primary (a standby that has fallen behind)
 *
 * Options (flags or environment):
 *   --short | TORTURE_SHORT=1            the CI variant
 *   --seed N | TORTURE_SEED=N            reproduce the same message plan (timings still vary)
 *   --keep | TORTURE_KEEP=1              keep the database (and an own cluster) and the service logs
 *                                        (the logs are kept anyway when an invariant is violated)
 *   --database-url URL | TORTURE_DATABASE_URL   the HTTP and AMQP modes' server: postgres://… (a superuser) or
 *                                        mysql://… / mariadb://… (a user that may create databases and KILL the
 *                                        service's connections), instead of an own PostgreSQL cluster
 *   TORTURE_POSTGRES_URL / TEST_POSTGRES_URL   use this server (superuser) instead of an own cluster;
 *                                        the long variant uses only TORTURE_POSTGRES_URL, because it
 *                                        restarts PostgreSQL and so needs a cluster of its own
 *   TORTURE_TRAFFIC_S, TORTURE_CLIENTS   override the variant's traffic time and client count
 *
 * Traffic goes to 127.0.0.1 only. Every loop is bounded in count and time, and every process and
 * cluster this script starts is stopped at the end, on failure and on Ctrl-C.
 */
import { say } from './log.js';
import { readOptions } from './plan.js';
import { cleanupSync } from './processes.js';

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    say(`${signal}: stopping everything this run started`);
    cleanupSync();
    process.exit(130);
  });
}
process.on('exit', () => cleanupSync());

const options = readOptions();
// Each mode is loaded only when chosen: the AMQP mode imports service modules the HTTP mode does not need.
const run = options.failover
  ? (await import('./failover/run.js')).runFailover
  : options.amqp
    ? (await import('./amqp/run.js')).runAmqp
    : (await import('./http-run.js')).runHttp;
run(options).then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(error);
    cleanupSync();
    process.exit(1);
  },
);
