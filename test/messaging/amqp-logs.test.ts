import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { RESERVE_STOCK } from '../../src/inventory/order.commands.js';
import { eventually, skipWithoutAmqp, TestBroker, uniqueTopology } from '../support/amqp.js';
import { testDatabases, type TestDatabaseHandle } from '../support/databases.js';
import { newId, orderPlaced, seedBook, testApp } from '../support/fixtures.js';
import { captureLogs } from '../support/logs.js';

/**
 * What the log says about RabbitMQ: a start-up with AMQP_URL writes no warning (the relay waiting for
 * its first connection is not a failure), and every settled delivery gets one line like an HTTP
 * command's, without the payload.
 */

const WARN = 40;

describe('AMQP in the log', { skip: skipWithoutAmqp }, () => {
  let database: TestDatabaseHandle;
  let app: FastifyInstance;
  let broker: TestBroker;
  const logs = captureLogs();

  before(async () => {
    database = await testDatabases[0]!.open();
    const topology = uniqueTopology();
    broker = await TestBroker.open(topology);
    app = await testApp(database, {
      logger: { level: 'debug', stream: logs.stream },
      config: { ...topology, amqpRetryDelayMs: 50, outboxRelayIntervalMs: 100 },
    });
  });
  after(async () => {
    await app?.close();
    await broker?.close();
    await database?.close();
  });

  test('start-up: "AMQP connected", and no warning before it or after it', async () => {
    await eventually('connected', async () => (logs.lines().some((l) => l.msg === 'AMQP connected') ? true : undefined));
    // The relay's first batch may run before its connection is up: that is logged at debug, without a stack.
    await eventually('the relay published or waited', async () =>
      logs.lines().some((l) => /outbox relay/.test(l.msg) || l.msg === 'AMQP connected') ? true : undefined,
    );
    const warnings = logs.lines().filter((l) => l.level >= WARN);
    assert.deepEqual(
      warnings.map((l) => l.msg),
      [],
      'warnings at start-up',
    );
    for (const line of logs.lines().filter((l) => /backing off/.test(l.msg))) {
      assert.equal(line.err, undefined, 'a broker that is not there yet is a reason, not a stack');
    }
  });

  test('each settled delivery logs one "command" line: queue, consumer, key, result, duration, never the payload', async () => {
    const book = await seedBook(app, 5);
    const message = { ...orderPlaced(book, 1), data: { ...orderPlaced(book, 1).data, orderId: newId() } };
    broker.send(broker.topology.amqpOrderPlacedQueue, message);
    broker.send(broker.topology.amqpOrderPlacedQueue, message);
    const mine = () => logs.lines().filter((l) => l.msg === 'command' && l.messageId === message.messageId);
    await eventually('two lines', async () => (mine().length === 2 ? true : undefined));
    const [first, second] = mine();
    for (const line of [first!, second!]) {
      assert.equal(line.level, 30);
      assert.equal(line.transport, 'amqp');
      assert.equal(line.queue, broker.topology.amqpOrderPlacedQueue);
      assert.equal(line.consumer, RESERVE_STOCK);
      assert.equal(line.keySource, 'body');
      assert.equal(typeof line.durationMs, 'number');
      assert.doesNotMatch(JSON.stringify(line), new RegExp(book), 'no payload in the line');
    }
    assert.deepEqual([first!.result, second!.result].sort(), ['duplicate', 'processed']);
  });
});
