import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { claimKey } from '../../src/inbox/inbox.repository.js';
import { reportMissingDatabases, type TestDatabaseHandle, testDatabases } from '../support/databases.js';
import { admin, json, newId, orderPlaced, placeOrder, seedBook, testApp, type Pruned } from '../support/fixtures.js';
import { sample, scrape } from './prometheus.js';

const RESERVE = 'inventory.reserve-stock';
const EMAIL = 'notifications.stock-reserved-email';
const T0 = Date.parse('2026-06-15T12:00:00.000Z');

function commands(text: string, result: string, consumer = RESERVE): number | undefined {
  return sample(text, 'inbox_commands_total', { consumer, result });
}

/** /metrics as Prometheus scrapes it: counters that move with what commands did, gauges read at scrape time. */
reportMissingDatabases((name) => `metrics on ${name}`);
for (const target of testDatabases) {
  describe(`metrics on ${target.name}`, () => {
    let database: TestDatabaseHandle;
    let app: FastifyInstance;
    let clock = T0;

    before(async () => {
      database = await target.open();
      app = await testApp(database, { now: () => new Date(clock), config: { inboxPruneIntervalMs: 0 } });
    });
    after(async () => {
      await app?.close();
      await database?.close();
    });

    test('GET /metrics is Prometheus text with process metrics and every consumer at zero', async () => {
      const res = await app.inject({ url: '/metrics' });
      assert.equal(res.statusCode, 200);
      assert.match(String(res.headers['content-type']), /^text\/plain; version=0\.0\.4/);
      assert.ok(sample(res.body, 'process_cpu_user_seconds_total') !== undefined, 'default process metrics');
      assert.ok(sample(res.body, 'nodejs_heap_size_used_bytes') !== undefined, 'default Node.js metrics');
      for (const consumer of [RESERVE, 'inventory.release-stock', EMAIL]) {
        for (const result of [
          'processed',
          'duplicate',
          'fingerprint-mismatch',
          'in-flight',
          'needs-reconciliation',
          'overloaded',
          'database-busy',
          'rejected',
          'failed',
        ]) {
          assert.equal(commands(res.body, result, consumer), 0, `${consumer} ${result} is exported at 0`);
        }
      }
      assert.equal(sample(res.body, 'inbox_pruned_rows_total', { table: 'inbox' }), 0);
      assert.doesNotMatch(res.body, /^outbox_relay_connected/m, 'no relay without AMQP_URL, so no relay gauge');
    });

    test('counters move as commands are processed, duplicated, mismatched and rejected', async () => {
      const dune = await seedBook(app, 10);
      const message = orderPlaced(dune, 2);
      const before = await scrape(app);

      assert.equal((await placeOrder(app, message)).statusCode, 201);
      const afterProcessed = await scrape(app);
      assert.equal((await placeOrder(app, message)).statusCode, 200);
      assert.equal((await placeOrder(app, message)).statusCode, 200);
      const afterDuplicates = await scrape(app);
      assert.equal((await placeOrder(app, { ...message, data: { ...message.data, quantity: 3 } })).statusCode, 422);
      const afterMismatch = await scrape(app);
      assert.equal((await placeOrder(app, { messageId: `m-${newId()}`, data: { orderId: 'nope' } })).statusCode, 400);
      const afterRejected = await scrape(app);

      const delta = (later: string, earlier: string, result: string) => (commands(later, result) ?? 0) - (commands(earlier, result) ?? 0);
      assert.equal(delta(afterProcessed, before, 'processed'), 1);
      assert.equal(delta(afterProcessed, before, 'duplicate'), 0);
      assert.equal(delta(afterDuplicates, afterProcessed, 'duplicate'), 2);
      assert.equal(delta(afterDuplicates, afterProcessed, 'processed'), 0);
      assert.equal(delta(afterMismatch, afterDuplicates, 'fingerprint-mismatch'), 1);
      assert.equal(delta(afterMismatch, afterDuplicates, 'rejected'), 0);
      assert.equal(delta(afterRejected, afterMismatch, 'rejected'), 1);
      assert.equal(delta(afterRejected, afterMismatch, 'processed'), 0);

      const latencyCount = (text: string, result: string) =>
        sample(text, 'inbox_command_duration_seconds_count', { consumer: RESERVE, result }) ?? 0;
      assert.equal(latencyCount(afterRejected, 'processed') - latencyCount(before, 'processed'), 1, 'one latency observation per command');
      assert.equal(latencyCount(afterRejected, 'duplicate') - latencyCount(before, 'duplicate'), 2);
    });

    test('in-progress records, those past their lease and the age of the oldest are read at scrape time', async () => {
      const zero = await scrape(app);
      assert.equal(sample(zero, 'inbox_in_progress_records', { consumer: EMAIL }), 0);
      assert.equal(sample(zero, 'inbox_in_progress_past_lease_records', { consumer: EMAIL }), 0);
      assert.equal(sample(zero, 'inbox_oldest_in_progress_age_seconds', { consumer: EMAIL }), 0);

      clock = T0;
      // Received 600 s and 90 s ago with a 30 s lease: both past it. Received 10 s ago: its attempt is presumed alive.
      for (const ageSeconds of [600, 90, 10]) {
        await claimKey(database.db, {
          messageId: `email-${newId()}`,
          consumer: EMAIL,
          keySource: 'body',
          fingerprint: 'e'.repeat(64),
          receivedAt: new Date(T0 - ageSeconds * 1000),
          leaseUntil: new Date(T0 - ageSeconds * 1000 + 30_000),
        });
      }
      const text = await scrape(app);
      assert.equal(sample(text, 'inbox_in_progress_records', { consumer: EMAIL }), 3);
      assert.equal(sample(text, 'inbox_in_progress_past_lease_records', { consumer: EMAIL }), 2);
      assert.equal(sample(text, 'inbox_oldest_in_progress_age_seconds', { consumer: EMAIL }), 600);
      assert.equal(sample(text, 'inbox_in_progress_records', { consumer: RESERVE }), 0);
      assert.equal(sample(text, 'inbox_in_progress_past_lease_records', { consumer: RESERVE }), 0);

      // The youngest one's lease runs out: the clock, not a new write, moves it into the count.
      clock = T0 + 25_000;
      assert.equal(sample(await scrape(app), 'inbox_in_progress_past_lease_records', { consumer: EMAIL }), 3);
      clock = T0;
    });

    test('pruned rows are counted', async () => {
      const before = sample(await scrape(app), 'inbox_pruned_rows_total', { table: 'inbox' }) ?? 0;
      clock = T0 - 30 * 86_400_000;
      const dune = await seedBook(app, 10);
      assert.equal((await placeOrder(app, orderPlaced(dune, 1))).statusCode, 201);
      clock = T0;
      const pruned = await app.inject({ method: 'POST', url: '/inbox/prune', headers: admin });
      assert.equal(pruned.statusCode, 200);
      assert.ok(json<Pruned>(pruned).inbox >= 1);
      const after = sample(await scrape(app), 'inbox_pruned_rows_total', { table: 'inbox' }) ?? 0;
      assert.equal(after - before, json<Pruned>(pruned).inbox);
    });

    if (target.name === 'postgres' || target.name === 'mysql') {
      test(`the ${target.name === 'postgres' ? 'pg' : 'mysql2'} pool is exported: connections by state and waiting queries`, async () => {
        const text = await scrape(app);
        const idle = sample(text, 'db_pool_connections', { state: 'idle' });
        const inUse = sample(text, 'db_pool_connections', { state: 'in_use' });
        assert.ok(idle !== undefined && idle >= 0, 'idle connections');
        assert.ok(inUse !== undefined && inUse >= 0, 'connections in use');
        assert.equal(sample(text, 'db_pool_waiting_requests'), 0);
      });
    } else {
      test('no pool gauges where the driver exposes none', async () => {
        assert.equal(sample(await scrape(app), 'db_pool_waiting_requests'), undefined);
      });
    }
  });
}

describe('metrics while the database does not answer', () => {
  test('the scrape still answers: the query-read gauges are absent (not 0) and each failed query is counted', async () => {
    const database = await testDatabases[0]!.open();
    const app = await testApp(database, { config: { inboxPruneIntervalMs: 0 } });
    try {
      const up = await scrape(app);
      assert.equal(sample(up, 'outbox_pending_events'), 0);
      assert.equal(sample(up, 'outbox_oldest_pending_age_seconds'), 0);
      assert.equal(sample(up, 'inbox_metrics_query_failures_total'), 0);

      await database.close();
      const down = await scrape(app);
      for (const name of [
        'outbox_pending_events',
        'outbox_oldest_pending_age_seconds',
        'inbox_in_progress_records',
        'inbox_in_progress_past_lease_records',
        'inbox_oldest_in_progress_age_seconds',
      ]) {
        assert.doesNotMatch(down, new RegExp(`^${name}[ {]`, 'm'), `${name} is absent, not a value the database did not give`);
      }
      assert.equal(sample(down, 'inbox_metrics_query_failures_total'), 2, 'the in-progress query and the outbox query');
      assert.equal(commands(down, 'processed'), 0, 'the counters are still there');
    } finally {
      await app.close();
    }
  });
});

describe('metrics registries', () => {
  test('each app has its own registry: two apps in one process count separately', async () => {
    const target = testDatabases[0]!;
    const [one, two] = [await target.open(), await target.open()];
    const apps = [await testApp(one, { config: { inboxPruneIntervalMs: 0 } }), await testApp(two, { config: { inboxPruneIntervalMs: 0 } })];
    try {
      const dune = await seedBook(apps[0]!, 5);
      assert.equal((await placeOrder(apps[0]!, orderPlaced(dune, 1))).statusCode, 201);
      assert.equal(commands(await scrape(apps[0]!), 'processed'), 1);
      assert.equal(commands(await scrape(apps[1]!), 'processed'), 0);
    } finally {
      await Promise.all(apps.map((a) => a.close()));
      await Promise.all([one.close(), two.close()]);
    }
  });
});
