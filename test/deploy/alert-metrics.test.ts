import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { freePort } from '../../scripts/free-port.js';
import { amqpUrl, TestBroker, uniqueTopology } from '../support/amqp.js';
import { testDatabases, type TestDatabaseHandle } from '../support/databases.js';
import { orderPlaced, placeOrder, seedBook, testApp } from '../support/fixtures.js';
import { exportedSeries, namesIn, rulesOf, unknownNames, type NameCheckOptions } from '../support/promql.js';
import { scrape } from '../operations/prometheus.js';

/**
 * The alert rules name only what the service really exports: a running service (buildApp on PGlite,
 * with a relay configured, since several rules read the relay's and the AMQP consumers' series) is
 * scraped, and every metric, label and label value of every rule's expression is looked up in it.
 */

const root = fileURLToPath(new URL('../../', import.meta.url));
const rules = rulesOf(readFileSync(join(root, 'deploy/prometheus/alerts.yml'), 'utf8'));
const fixturePath = join(root, 'test/deploy/fixtures/unknown-names.alerts.yml');

/** `up` is Prometheus's own; job and instance are the target's labels, which Prometheus adds at scrape. */
const OPTIONS: NameCheckOptions = { prometheusSeries: { up: ['job', 'instance'] }, targetLabels: ['job', 'instance'] };

describe('the alert rules against /metrics of a running service', () => {
  let database: TestDatabaseHandle;
  let app: FastifyInstance;
  let broker: TestBroker | undefined;
  let exposition: Map<string, Record<string, string>[]>;

  before(async () => {
    database = await testDatabases[0]!.open();
    // The relay's gauge and the delivery counters exist only with AMQP_URL. Against the test broker when
    // there is one; otherwise a loopback port nothing listens on: the service starts, its relay reconnects.
    const amqp = uniqueTopology(amqpUrl ?? `amqp://guest:guest@127.0.0.1:${await freePort()}`);
    // On the test broker, the test's own queues and exchanges, deleted afterwards.
    if (amqpUrl !== undefined) broker = await TestBroker.open(amqp);
    app = await testApp(database, { config: { ...amqp, inboxPruneIntervalMs: 0 } });
    // Commands processed, replayed and dead-lettered (a key reused with another payload).
    const book = await seedBook(app, 10);
    const message = orderPlaced(book, 1);
    assert.equal((await placeOrder(app, message)).statusCode, 201);
    assert.equal((await placeOrder(app, message)).statusCode, 200);
    assert.equal((await placeOrder(app, { ...message, data: { ...message.data, quantity: 2 } })).statusCode, 422);
    exposition = exportedSeries(await scrape(app));
  });
  after(async () => {
    await app?.close();
    await broker?.close();
    await database?.close();
  });

  test('the exposition is what the rules read: commands by result, in-progress past lease by consumer, the relay, the outbox', () => {
    const results = new Set(exposition.get('inbox_commands_total')?.map((s) => s.result));
    for (const result of ['processed', 'duplicate', 'fingerprint-mismatch', 'overloaded', 'database-busy', 'failed']) {
      assert.ok(results.has(result), `inbox_commands_total{result="${result}"}: ${[...results].join(', ')}`);
    }
    assert.deepEqual(
      new Set(exposition.get('inbox_in_progress_past_lease_records')?.map((s) => s.consumer)),
      new Set(['inventory.reserve-stock', 'inventory.release-stock', 'notifications.stock-reserved-email']),
    );
    assert.equal(exposition.get('outbox_relay_connected')?.length, 1);
    assert.equal(exposition.get('outbox_pending_events')?.length, 1);
  });

  test('every metric, label and label value the rules name is exported', () => {
    const selectors = rules.flatMap((r) => namesIn(r.expr).selectors);
    assert.ok(selectors.length >= rules.length, `only ${selectors.length} selectors read from ${rules.length} rules`);
    assert.deepEqual(unknownNames(rules, exposition, OPTIONS), []);
  });

  test('a rule naming what is not exported fails the check, one problem per wrong name (a fixture rule file)', () => {
    const problems = unknownNames(rulesOf(readFileSync(fixturePath, 'utf8')), exposition, OPTIONS);
    const expected = [
      /^MisspelledMetric: metric inbox_in_progress_past_lease_record is not exported$/,
      /^UnknownLabel: inbox_commands_total has no label outcome$/,
      /^UnknownLabelValue: no inbox_commands_total series has result="overload"/,
      /^UnknownGroupingLabel: grouping label queue is on none of the expression's series$/,
      /^UnknownGroupingLabel: template label \$labels\.queue is on none of the expression's series$/,
      /^UnknownTemplateLabel: template label \$labels\.consumer is on none of the expression's series$/,
      /^UnmatchedRegex: no amqp_command_deliveries_total series has a result matching dead-letter\|requeue$/,
    ];
    assert.equal(problems.length, expected.length, problems.join('\n'));
    for (const pattern of expected) {
      assert.ok(
        problems.some((p) => pattern.test(p)),
        `${pattern} not among:\n${problems.join('\n')}`,
      );
    }
  });

  test(
    'promtool alone would not catch them: it accepts the fixture',
    { skip: spawnSync('promtool', ['--version']).status === 0 ? false : 'promtool is not installed' },
    () => {
      const result = spawnSync('promtool', ['check', 'rules', fixturePath], { encoding: 'utf8' });
      assert.equal(result.status, 0, result.stdout + result.stderr);
    },
  );
});

describe('reading PromQL', () => {
  test('selectors, matchers and grouping labels of a nested expression, by the PromQL grammar', () => {
    const names = namesIn(
      'max by (job) (a_seconds and on (job, instance) b{x="1", y=~\'p|q\'}) > 300 unless ignoring (z) c_total{w!=`raw\\d`}',
    );
    assert.deepEqual(names.selectors, [
      { metric: 'a_seconds', matchers: [] },
      {
        metric: 'b',
        matchers: [
          { label: 'x', op: '=', value: '1' },
          { label: 'y', op: '=~', value: 'p|q' },
        ],
      },
      { metric: 'c_total', matchers: [{ label: 'w', op: '!=', value: 'raw\\d' }] },
    ]);
    assert.deepEqual(names.groupingLabels, ['job', 'job', 'instance', 'z']);
  });

  test('a syntax error is an error, not an empty list', () => {
    assert.throws(() => namesIn('sum by (job (rate(x[5m]))'), /syntax error/);
  });

  test('exposition lines: escaped label values read back as exported', () => {
    const series = exportedSeries('# HELP m x\n# TYPE m gauge\nm{a="q\\"uote",b="back\\\\slash"} 1\nn 2\n');
    assert.deepEqual(series.get('m'), [{ a: 'q"uote', b: 'back\\slash' }]);
    assert.deepEqual(series.get('n'), [{}]);
  });
});
