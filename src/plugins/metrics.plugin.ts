import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { DeliveryResult } from '../adapters/amqp/index.js';
import { retryOnceIfDeadlocked } from '../db/dialect.js';
import { inProgressByConsumer } from '../inbox/machinery.js';
import { pendingOutboxStats } from '../outbox/outbox.repository.js';
import { PROBLEM_PATH } from '../http/problem.js';

/** How a command request ended, as counted and logged. */
export type CommandOutcome =
  | 'processed'
  | 'duplicate'
  | 'fingerprint-mismatch'
  | 'in-flight'
  | 'needs-reconciliation'
  | 'overloaded'
  | 'database-busy'
  | 'rejected'
  | 'failed';

export const COMMAND_OUTCOMES: readonly CommandOutcome[] = [
  'processed',
  'duplicate',
  'fingerprint-mismatch',
  'in-flight',
  'needs-reconciliation',
  'overloaded',
  'database-busy',
  'rejected',
  'failed',
];

const OUTCOME_BY_PROBLEM: Record<string, CommandOutcome> = {
  'idempotency-key-reused': 'fingerprint-mismatch',
  'in-flight': 'in-flight',
  'needs-reconciliation': 'needs-reconciliation',
  overloaded: 'overloaded',
  // A lock wait past the bound or a deadlock victim: the database turned this command away, not a fault of ours.
  'database-busy': 'database-busy',
};

/**
 * The outcome of a finished command request: what the inbox decided, or else the problem it answered
 * with: 4xx other than the inbox's own refusals is `rejected` (nothing recorded), 5xx is `failed`.
 */
export function commandOutcome(request: FastifyRequest, reply: FastifyReply): CommandOutcome {
  if (request.inboxResult !== undefined && reply.statusCode < 300) return request.inboxResult;
  const slug = request.problemType?.startsWith(PROBLEM_PATH) ? request.problemType.slice(PROBLEM_PATH.length) : undefined;
  const byProblem = slug === undefined ? undefined : OUTCOME_BY_PROBLEM[slug];
  if (byProblem !== undefined) return byProblem;
  return reply.statusCode >= 500 ? 'failed' : 'rejected';
}

export interface Metrics {
  readonly registry: Registry;
  /** Counts one group-commit transaction and the commands it committed. */
  recordBatch(consumer: string, size: number): void;
  /** Counts a copy answered from the duplicate cache. */
  recordCacheHit(consumer: string): void;
  /** Counts rows a retention run deleted. */
  recordPruned(table: 'inbox' | 'dead_letters' | 'outbox', rows: number): void;
  /** Counts outbox events the relay published (confirmed) and those whose publish failed. */
  recordPublished(events: number): void;
  recordPublishFailures(events: number): void;
  /** Counts an AMQP command delivery by queue and how it was settled (count 0: declares the series). */
  recordDelivery(queue: string, result: DeliveryResult, count?: number): void;
  /** Exports whether the outbox relay can publish, read at scrape time; called once, when there is a relay. */
  watchRelay(connected: () => boolean): void;
}

declare module 'fastify' {
  interface FastifyInstance {
    metrics: Metrics;
  }
}

const LATENCY_BUCKETS_SECONDS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

interface CommandMetrics {
  readonly commands: Counter<'consumer' | 'result'>;
  readonly latency: Histogram<'consumer' | 'result'>;
}

interface OutboxMetrics {
  readonly pending: Gauge;
  readonly oldestAge: Gauge;
  readonly published: Counter;
  readonly failures: Counter;
}

interface GroupCommitMetrics {
  readonly batchSize: Histogram<'consumer'>;
  readonly cacheHits: Counter<'consumer'>;
}

interface InProgressMetrics {
  readonly count: Gauge<'consumer'>;
  readonly pastLease: Gauge<'consumer'>;
  readonly oldestAge: Gauge<'consumer'>;
}

/** Command requests and their latency, by consumer and how they ended. */
function createCommandMetrics(registry: Registry): CommandMetrics {
  const commands = new Counter({
    name: 'inbox_commands_total',
    help:
      'Command requests by consumer and result: processed, duplicate, fingerprint-mismatch, in-flight, needs-reconciliation, ' +
      'overloaded (503, nothing recorded), database-busy (503, lock wait or deadlock, nothing recorded), rejected (4xx, nothing ' +
      'recorded), failed (other 5xx)',
    labelNames: ['consumer', 'result'] as const,
    registers: [registry],
  });
  const latency = new Histogram({
    name: 'inbox_command_duration_seconds',
    help: 'Command latency from request to response, by consumer and result',
    labelNames: ['consumer', 'result'] as const,
    buckets: LATENCY_BUCKETS_SECONDS,
    registers: [registry],
  });
  return { commands, latency };
}

/** Rows deleted by retention, every table's series present from the start. */
function createPrunedRows(registry: Registry): Counter<'table'> {
  const pruned = new Counter({
    name: 'inbox_pruned_rows_total',
    help: 'Rows deleted by retention, by table (inbox: completed records; dead_letters)',
    labelNames: ['table'] as const,
    registers: [registry],
  });
  pruned.inc({ table: 'inbox' }, 0);
  pruned.inc({ table: 'dead_letters' }, 0);
  pruned.inc({ table: 'outbox' }, 0);
  return pruned;
}

/** The outbox backlog (refreshed per scrape) and what the relay published or failed to. */
function createOutboxMetrics(registry: Registry): OutboxMetrics {
  const pending = new Gauge({
    name: 'outbox_pending_events',
    help: 'Outbox events written and not yet published (confirmed by the broker)',
    registers: [registry],
  });
  const oldestAge = new Gauge({
    name: 'outbox_oldest_pending_age_seconds',
    help: 'Age of the oldest outbox event not yet published (0 when none): a growing value is a relay that cannot publish',
    registers: [registry],
  });
  const published = new Counter({
    name: 'outbox_published_events_total',
    help: 'Outbox events published and confirmed by the broker (a republished event counts again)',
    registers: [registry],
  });
  published.inc(0);
  const failures = new Counter({
    name: 'outbox_publish_failures_total',
    help: 'Outbox events whose publish attempt failed (broker unreachable, nack, no confirm in time); they stay pending and go again',
    registers: [registry],
  });
  failures.inc(0);
  return { pending, oldestAge, published, failures };
}

/** AMQP command deliveries by queue and how they were settled. */
function createDeliveryMetrics(registry: Registry): Counter<'queue' | 'result'> {
  return new Counter({
    name: 'amqp_command_deliveries_total',
    help:
      'AMQP command deliveries by queue and settlement: processed and duplicate (acked), dead-lettered (rejected, not ' +
      'requeued), requeued (transient failure)',
    labelNames: ['queue', 'result'] as const,
    registers: [registry],
  });
}

/** Group-commit batches and the duplicate cache; the queue and cache gauges read the app when scraped. */
function createGroupCommitMetrics(app: FastifyInstance, registry: Registry): GroupCommitMetrics {
  const batchSize = new Histogram({
    name: 'inbox_batch_size',
    help: 'Commands committed by one group-commit transaction of several, by consumer',
    labelNames: ['consumer'] as const,
    buckets: [2, 4, 8, 16, 32, 64, 128],
    registers: [registry],
  });
  const cacheHits = new Counter({
    name: 'inbox_duplicate_cache_hits_total',
    help: 'Copies answered from the in-memory cache of completed records, without the database, by consumer',
    labelNames: ['consumer'] as const,
    registers: [registry],
  });
  new Gauge({
    name: 'inbox_queued_commands',
    help: 'Commands waiting for a group-commit transaction (beyond INBOX_QUEUE_LIMIT per consumer they are refused as overloaded)',
    registers: [registry],
    collect() {
      this.set(app.commands.queued);
    },
  });
  new Gauge({
    name: 'http_commands_in_flight',
    help: 'Command requests admitted and not yet answered (at most HTTP_MAX_COMMANDS_IN_FLIGHT)',
    registers: [registry],
    collect() {
      this.set(app.hasDecorator('commandAdmission') ? app.commandAdmission.inFlight : 0);
    },
  });
  new Gauge({
    name: 'http_commands_waiting',
    help: 'Command requests past HTTP_MAX_COMMANDS_IN_FLIGHT waiting, unread, for a place (at most HTTP_ADMISSION_WAIT_MS each)',
    registers: [registry],
    collect() {
      this.set(app.hasDecorator('commandAdmission') ? app.commandAdmission.waiting : 0);
    },
  });
  new Gauge({
    name: 'inbox_duplicate_cache_entries',
    help: 'Completed records held in the duplicate cache',
    registers: [registry],
    collect() {
      this.set(app.duplicateCache.size);
    },
  });
  return { batchSize, cacheHits };
}

/** Inbox records still in progress and the age of the oldest, by consumer (refreshed per scrape). */
function createInProgressMetrics(registry: Registry): InProgressMetrics {
  const count = new Gauge({
    name: 'inbox_in_progress_records',
    help: 'Inbox records still in progress (two-phase side effects not yet recorded), by consumer',
    labelNames: ['consumer'] as const,
    registers: [registry],
  });
  const pastLease = new Gauge({
    name: 'inbox_in_progress_past_lease_records',
    help:
      'Inbox records in progress past their lease, by consumer: no attempt is presumed alive, so each waits for a redelivery or ' +
      'an operator (GET /inbox/needs-reconciliation)',
    labelNames: ['consumer'] as const,
    registers: [registry],
  });
  const oldestAge = new Gauge({
    name: 'inbox_oldest_in_progress_age_seconds',
    help:
      'Age of the oldest in-progress inbox record, by consumer (0 when none): a growing value is a side effect waiting for ' +
      'reconciliation',
    labelNames: ['consumer'] as const,
    registers: [registry],
  });
  return { count, pastLease, oldestAge };
}

/**
 * Whether the relay has a channel to the broker. Registered only with a relay (AMQP_URL set): without one
 * the series is absent, so an alert on it, or gated by it, says nothing about a service that publishes nothing.
 */
function watchRelay(registry: Registry, connected: () => boolean): void {
  new Gauge({
    name: 'outbox_relay_connected',
    help: '1 while the outbox relay has a channel to the broker, 0 while it is disconnected and reconnecting (absent without AMQP_URL)',
    registers: [registry],
    collect() {
      this.set(connected() ? 1 : 0);
    },
  });
}

/** Pool connection gauges, for a database whose pool exposes its counts. */
function createPoolMetrics(app: FastifyInstance, registry: Registry): void {
  // pg exposes its pool counts; PGlite has no pool and the SQL Server pool does not expose them.
  if (app.database.poolStats() === undefined) return;
  new Gauge({
    name: 'db_pool_connections',
    help: 'Database pool connections by state (idle, in_use)',
    labelNames: ['state'] as const,
    registers: [registry],
    collect() {
      const now = app.database.poolStats();
      if (now === undefined) return;
      this.set({ state: 'idle' }, now.idle);
      this.set({ state: 'in_use' }, now.total - now.idle);
    },
  });
  new Gauge({
    name: 'db_pool_waiting_requests',
    help: 'Queries waiting for a pooled connection',
    registers: [registry],
    collect() {
      this.set(app.database.poolStats()?.waiting ?? 0);
    },
  });
}

/**
 * Counts every command request by its outcome. Every command consumer starts at zero for every
 * outcome, so rate() works from the first scrape. Returns the consumers, filled as routes register.
 */
function countCommandRequests(app: FastifyInstance, { commands, latency }: CommandMetrics): ReadonlySet<string> {
  const consumers = new Set<string>();
  app.addHook('onRoute', (route) => {
    const consumer = route.config?.consumer;
    if (consumer === undefined) return;
    consumers.add(consumer);
    for (const outcome of COMMAND_OUTCOMES) commands.inc({ consumer, result: outcome }, 0);
  });

  // Callback style: an async hook costs a promise per request.
  app.addHook('onResponse', (request, reply, done) => {
    const consumer = request.routeOptions.config.consumer;
    if (consumer !== undefined) {
      const result = commandOutcome(request, reply);
      commands.inc({ consumer, result });
      latency.observe({ consumer, result }, reply.elapsedTime / 1000);
    }
    done();
  });
  return consumers;
}

/** One grouped query per scrape, on the completed_at index, for both in-progress gauges. */
async function refreshInProgress(
  app: FastifyInstance,
  gauges: InProgressMetrics,
  consumers: ReadonlySet<string>,
  scrapeFailures: Counter,
): Promise<void> {
  gauges.count.reset();
  gauges.pastLease.reset();
  gauges.oldestAge.reset();
  const now = app.now();
  let rows: Awaited<ReturnType<typeof inProgressByConsumer>>;
  try {
    rows = await retryOnceIfDeadlocked(() => inProgressByConsumer(app.db, now));
  } catch (error) {
    scrapeFailures.inc();
    app.log.warn({ err: error }, 'metrics: in-progress query failed');
    return;
  }
  // Zero, not absent, for a consumer with nothing in progress: alerts compare values, not presence.
  for (const consumer of consumers) {
    gauges.count.set({ consumer }, 0);
    gauges.pastLease.set({ consumer }, 0);
    gauges.oldestAge.set({ consumer }, 0);
  }
  for (const row of rows) {
    gauges.count.set({ consumer: row.consumer }, row.count);
    gauges.pastLease.set({ consumer: row.consumer }, row.pastLease);
    if (row.oldest !== null) {
      gauges.oldestAge.set({ consumer: row.consumer }, Math.max(0, (now.getTime() - row.oldest.getTime()) / 1000));
    }
  }
}

/** One query on the pending-events index per scrape, for both outbox gauges. */
async function refreshOutbox(app: FastifyInstance, outbox: OutboxMetrics, scrapeFailures: Counter): Promise<void> {
  outbox.pending.reset();
  outbox.oldestAge.reset();
  let stats;
  try {
    stats = await pendingOutboxStats(app.db);
  } catch (error) {
    scrapeFailures.inc();
    app.log.warn({ err: error }, 'metrics: outbox query failed');
    // Absent, not 0: reset() leaves an unlabelled gauge at 0, which would read as "nothing pending" while
    // the database cannot say (and an alert on the backlog's age would resolve during the outage).
    outbox.pending.remove();
    outbox.oldestAge.remove();
    return;
  }
  outbox.pending.set(stats.pending);
  outbox.oldestAge.set(stats.oldest === null ? 0 : Math.max(0, (app.now().getTime() - stats.oldest.getTime()) / 1000));
}

/** GET /metrics: runs `refresh` for the gauges that need a query, then renders the registry. */
function registerMetricsRoute(app: FastifyInstance, registry: Registry, refresh: () => Promise<void>): void {
  app.get(
    '/metrics',
    {
      schema: {
        operationId: 'metrics',
        tags: ['operations'],
        summary: 'Prometheus metrics (text exposition format)',
        security: [],
        response: { 200: { description: 'Prometheus text format 0.0.4', content: { 'text/plain': { schema: { type: 'string' } } } } },
      },
    },
    async (_request, reply) => {
      await refresh();
      const body = await registry.metrics();
      return reply.type(registry.contentType).send(body);
    },
  );
}

/**
 * Prometheus metrics at GET /metrics. Each app owns its registry (tests build many apps in one
 * process, and the default global registry would refuse the second set of metric names).
 */
export const metrics = fp(
  async (app: FastifyInstance) => {
    const registry = new Registry();
    collectDefaultMetrics({ register: registry });

    // Created in the order they are exposed.
    const command = createCommandMetrics(registry);
    const pruned = createPrunedRows(registry);
    const outbox = createOutboxMetrics(registry);
    const deliveries = createDeliveryMetrics(registry);
    const groupCommit = createGroupCommitMetrics(app, registry);
    const inProgress = createInProgressMetrics(registry);
    const scrapeFailures = new Counter({
      name: 'inbox_metrics_query_failures_total',
      help: 'Scrapes whose in-progress or outbox query failed (database unavailable); those gauges are then absent',
      registers: [registry],
    });
    createPoolMetrics(app, registry);

    const consumers = countCommandRequests(app, command);

    app.decorate('metrics', {
      registry,
      recordPruned(table, rows) {
        pruned.inc({ table }, rows);
      },
      recordBatch(consumer, size) {
        groupCommit.batchSize.observe({ consumer }, size);
      },
      recordCacheHit(consumer) {
        groupCommit.cacheHits.inc({ consumer });
      },
      recordPublished(events) {
        outbox.published.inc(events);
      },
      recordPublishFailures(events) {
        outbox.failures.inc(events);
      },
      recordDelivery(queue, result, count = 1) {
        deliveries.inc({ queue, result }, count);
      },
      watchRelay(connected) {
        watchRelay(registry, connected);
      },
    } satisfies Metrics);

    registerMetricsRoute(app, registry, async () => {
      await refreshInProgress(app, inProgress, consumers, scrapeFailures);
      await refreshOutbox(app, outbox, scrapeFailures);
    });
  },
  { name: 'metrics', dependencies: ['services'] },
);
