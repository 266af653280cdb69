import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, test } from 'node:test';
import { createDatabase } from '../../src/schema/create-database.js';
import { stockEventId } from '../../src/inventory/stock-events.js';
import { RESERVE_STOCK } from '../../src/inventory/order.commands.js';
import { amqpUrl, eventBody, eventually, skipWithoutAmqp, TestBroker, uniqueTopology } from '../support/amqp.js';
import { postgresDatabase, serverDatabases, testDatabases } from '../support/databases.js';
import {
  admin,
  json,
  orderPlaced,
  placeOrder,
  reservedOf,
  seedBook,
  testApp,
  type DeadLetter,
  type OutboxEvent,
  type Page,
  holdStockRow,
} from '../support/fixtures.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { sample, scrape } from '../operations/prometheus.js';

/**
 * Faults around the broker and the database, on a real RabbitMQ: a broker outage longer than the
 * relay's backoff, a database outage under the consumers, a graceful shutdown with a message in flight,
 * and a command whose transaction rolls back. The outages are loopback TCP proxies cut and restored.
 */

const target = postgresDatabase ?? testDatabases[0]!;
/** The servers' ports when a URL names none. */
const DEFAULT_PORTS: Record<string, number> = {
  'postgres:': 5432,
  'postgresql:': 5432,
  'mysql:': 3306,
  'mariadb:': 3306,
  'mssql:': 1433,
  'sqlserver:': 1433,
};
const fast = { amqpRetryDelayMs: 50, amqpRetryMaxDelayMs: 400, outboxRelayIntervalMs: 100, outboxRelayMaxBackoffMs: 400 };

function eventsFor(messages: { content: Buffer }[], orderIds: Set<string>) {
  return messages.map(eventBody).filter((e) => orderIds.has(e.data.orderId));
}

describe(`outbox relay and consumers under faults (${target.name})`, { skip: skipWithoutAmqp }, () => {
  test(
    'the relay survives a broker outage longer than its backoff: commands keep being accepted, events accumulate, then drain',
    { timeout: 60_000 },
    async (t) => {
      const database = await target.open();
      t.after(() => database.close());
      const proxy = await TcpProxy.start('127.0.0.1', Number(new URL(amqpUrl!).port || 5672));
      t.after(() => proxy.close());
      const topology = uniqueTopology();
      const broker = await TestBroker.open(topology);
      t.after(() => broker.close());
      const tap = await broker.bindQueue(topology.amqpExchange);
      const app = await testApp(database, { config: { ...topology, ...fast, amqpUrl: proxy.url(amqpUrl!) } });
      t.after(() => app.close());

      const book = await seedBook(app, 100);
      const first = orderPlaced(book, 1);
      assert.equal((await placeOrder(app, first)).statusCode, 201);
      await eventually('the first event', async () => ((await broker.depth(tap)) === 1 ? true : undefined));
      assert.equal(sample(await scrape(app), 'outbox_relay_connected'), 1, 'the relay has its channel');

      proxy.cut();
      const during = Array.from({ length: 5 }, () => orderPlaced(book, 1));
      for (const message of during)
        assert.equal((await placeOrder(app, message)).statusCode, 201, 'commands are accepted while the broker is down');
      await sleep(2500); // several times OUTBOX_RELAY_MAX_BACKOFF_MS
      const metrics = await scrape(app);
      assert.equal(sample(metrics, 'outbox_pending_events'), 5, 'the events wait in the outbox');
      assert.ok(sample(metrics, 'outbox_oldest_pending_age_seconds')! >= 2, 'and their age shows it');
      const pending = json<Page<OutboxEvent>>(await app.inject({ url: '/outbox?state=pending', headers: admin }));
      assert.deepEqual(
        pending.items.map((e) => e.causationId),
        during.map((m) => m.messageId),
        'listed oldest first',
      );
      assert.equal(await broker.depth(tap), 1, 'nothing reached the broker meanwhile');
      assert.equal(sample(metrics, 'outbox_relay_connected'), 0, 'the relay is disconnected, and says so');

      proxy.restore();
      await eventually('the backlog drained', async () => ((await broker.depth(tap)) === 6 ? true : undefined), 20_000);
      assert.equal(sample(await scrape(app), 'outbox_relay_connected'), 1, 'connected again');
      const published = eventsFor(await broker.drain(tap), new Set([first, ...during].map((m) => m.data.orderId)));
      assert.deepEqual(
        published.map((e) => e.causationid),
        [first, ...during].map((m) => m.messageId),
        "one book's events arrive in the order of its stock changes",
      );
      assert.equal(sample(await scrape(app), 'outbox_pending_events'), 0);
      assert.equal(await reservedOf(app.db, book), 6);
    },
  );

  // The database faults on each database server the suite has: PostgreSQL, MariaDB/MySQL, SQL Server.
  for (const server of serverDatabases) {
    test(
      `a database outage requeues the message after a backoff, never counted toward AMQP_MAX_DELIVERIES; nothing is lost and it applies once the database is back (${server.name})`,
      { timeout: 60_000 },
      async (t) => {
        const database = await server.open();
        t.after(() => database.close());
        const serverUrl = new URL(database.url);
        const proxy = await TcpProxy.start(serverUrl.hostname, Number(serverUrl.port || DEFAULT_PORTS[serverUrl.protocol]));
        t.after(() => proxy.close());
        const proxied = await createDatabase(proxy.url(database.url), { lockTimeoutMs: 5000, poolMax: 4 });
        t.after(() => proxied.close());
        const topology = uniqueTopology();
        const broker = await TestBroker.open(topology);
        t.after(() => broker.close());
        // One delivery allowed: any requeue of the outage counted as a failure would dead-letter the message.
        const app = await testApp({ ...proxied, url: proxy.url(database.url) }, { config: { ...topology, ...fast, amqpMaxDeliveries: 1 } });
        t.after(() => app.close());
        const requeued = async () =>
          sample(await scrape(app).catch(() => ''), 'amqp_command_deliveries_total', {
            queue: topology.amqpOrderPlacedQueue,
            result: 'requeued',
          }) ?? 0;

        const book = await seedBook(app, 10);
        proxy.cut();
        const message = orderPlaced(book, 4);
        broker.send(topology.amqpOrderPlacedQueue, message);
        await eventually('three requeues', async () => ((await requeued()) >= 3 ? true : undefined), 20_000);

        proxy.restore();
        await eventually('the reservation', async () => ((await reservedOf(database.db, book)) === 4 ? true : undefined), 20_000);
        await eventually('the message acked', async () => ((await broker.depth(topology.amqpOrderPlacedQueue)) === 0 ? true : undefined));
        await sleep(300);
        assert.equal(await reservedOf(database.db, book), 4, 'applied once');
        const inbox = await database.db.selectFrom('inbox').selectAll().where('message_id', '=', message.messageId).execute();
        assert.equal(inbox.length, 1);
        const letters = await database.db.selectFrom('dead_letters').selectAll().where('message_id', '=', message.messageId).execute();
        assert.equal(letters.length, 0, 'a transient failure is not a dead letter');
      },
    );

    test(
      `a stock row held past the lock bound requeues the message, never counted toward AMQP_MAX_DELIVERIES; it applies once the row is free (${server.name})`,
      { timeout: 60_000 },
      async (t) => {
        const database = await server.open();
        t.after(() => database.close());
        const narrow = await createDatabase(database.url, { lockTimeoutMs: 200, poolMax: 4 });
        t.after(() => narrow.close());
        const topology = uniqueTopology();
        const broker = await TestBroker.open(topology);
        t.after(() => broker.close());
        // One delivery allowed: a lock timeout counted as a failure would dead-letter the message at once.
        const app = await testApp(
          { ...narrow, url: database.url },
          { config: { ...topology, ...fast, amqpMaxDeliveries: 1, inboxLockTimeoutMs: 200 } },
        );
        t.after(() => app.close());
        const deliveries = async (result: string) =>
          sample(await scrape(app), 'amqp_command_deliveries_total', { queue: topology.amqpOrderPlacedQueue, result }) ?? 0;
        const book = await seedBook(app, 10);
        const { release: unlock, done: holder } = await holdStockRow(database.db, book);
        const message = orderPlaced(book, 4);
        broker.send(topology.amqpOrderPlacedQueue, message);
        try {
          await eventually('three requeues', async () => ((await deliveries('requeued')) >= 3 ? true : undefined), 10_000);
        } finally {
          // Before the after-hooks close the database, which waits for this transaction.
          unlock();
          await holder;
        }

        await eventually('the reservation', async () => ((await reservedOf(database.db, book)) === 4 ? true : undefined), 20_000);
        assert.equal(await deliveries('dead-lettered'), 0);
        const letters = await database.db.selectFrom('dead_letters').selectAll().where('message_id', '=', message.messageId).execute();
        assert.equal(letters.length, 0, 'a busy database is not a dead letter');
      },
    );
  }

  test(
    'graceful shutdown: consuming stops, the in-flight message commits and is acked before the connection closes',
    { timeout: 60_000 },
    async (t) => {
      const database = await target.open();
      t.after(() => database.close());
      const topology = uniqueTopology();
      const broker = await TestBroker.open(topology);
      t.after(() => broker.close());
      let hold = false;
      const app = await testApp(database, {
        config: { ...topology, ...fast },
        testHooks: {
          beforeCommit: async () => {
            if (hold) await sleep(800);
          },
        },
      });
      const book = await seedBook(app, 10);
      hold = true;
      const message = orderPlaced(book, 2);
      broker.send(topology.amqpOrderPlacedQueue, message);
      await eventually('the message in flight', async () => (app.messaging.consumer!.inFlightCount === 1 ? true : undefined));
      const later = orderPlaced(book, 3);
      await app.close();
      broker.send(topology.amqpOrderPlacedQueue, later);

      assert.equal(await reservedOf(database.db, book), 2, 'the in-flight message committed');
      const record = await database.db.selectFrom('inbox').selectAll().where('message_id', '=', message.messageId).executeTakeFirst();
      assert.notEqual(record?.completed_at, null);
      await sleep(200);
      // Had it not been acked, closing the connection would have put it back in the queue.
      assert.equal(await broker.depth(topology.amqpOrderPlacedQueue), 1, 'only the message sent after shutdown waits');
      const left = await broker.drain(topology.amqpOrderPlacedQueue);
      assert.equal((JSON.parse(left[0]!.content.toString()) as { messageId: string }).messageId, later.messageId);
    },
  );

  test(
    'a command that fails unexpectedly on every delivery is dead-lettered on the AMQP_MAX_DELIVERIES-th, with the reason and the last error; other messages are processed',
    { timeout: 60_000 },
    async (t) => {
      const database = await target.open();
      t.after(() => database.close());
      const topology = uniqueTopology();
      const broker = await TestBroker.open(topology);
      t.after(() => broker.close());
      const deadLetters = await broker.bindQueue(topology.amqpDeadLetterExchange);
      const failing = new Set<string>();
      const app = await testApp(database, {
        config: { ...topology, ...fast, amqpMaxDeliveries: 3 },
        testHooks: {
          beforeCommit: async (message) => {
            if (failing.has(message.messageId)) throw new Error('injected failure before commit');
          },
        },
      });
      t.after(() => app.close());
      const deliveries = async (result: string) =>
        sample(await scrape(app), 'amqp_command_deliveries_total', { queue: topology.amqpOrderPlacedQueue, result }) ?? 0;
      const book = await seedBook(app, 10);
      const doomed = orderPlaced(book, 2);
      failing.add(doomed.messageId);
      broker.send(topology.amqpOrderPlacedQueue, doomed);
      const kept = orderPlaced(book, 3);
      broker.send(topology.amqpOrderPlacedQueue, kept);

      await eventually('the doomed message dead-lettered', async () => ((await deliveries('dead-lettered')) === 1 ? true : undefined));
      const letters = await database.db
        .selectFrom('dead_letters')
        .select(['consumer', 'reason', 'detail', 'payload'])
        .where('message_id', '=', doomed.messageId)
        .execute();
      assert.equal(letters.length, 1);
      assert.equal(letters[0]!.consumer, RESERVE_STOCK);
      assert.equal(letters[0]!.reason, 'delivery-limit');
      assert.equal(letters[0]!.detail, 'failed on 3 deliveries; the last error: injected failure before commit');
      const listed = json<Page<DeadLetter>>(await app.inject({ url: `/dead-letters?consumer=${RESERVE_STOCK}`, headers: admin }));
      assert.deepEqual(
        listed.items.map((l) => [l.messageId, l.reason, l.detail, l.payload]),
        [[doomed.messageId, 'delivery-limit', letters[0]!.detail, doomed]],
        'the admin API lists it with the message as sent',
      );

      const dead = await eventually('the message on the dead-letter exchange', async () => {
        const got = await broker.drain(deadLetters);
        return got.length > 0 ? got : undefined;
      });
      assert.equal(dead.length, 1);
      assert.equal((JSON.parse(dead[0]!.content.toString()) as { messageId: string }).messageId, doomed.messageId);
      assert.equal((dead[0]!.properties.headers?.['x-death'] as { reason: string }[] | undefined)?.[0]?.reason, 'rejected');
      assert.equal(dead[0]!.properties.headers?.['x-bookstore-attempts'], 2, 'two failed deliveries before the last');
      assert.equal(await deliveries('requeued'), 2, 'delivered three times in all');

      await eventually('the other order', async () => ((await reservedOf(database.db, book)) === 3 ? true : undefined));
      await sleep(300);
      assert.equal(await broker.depth(topology.amqpOrderPlacedQueue), 0, 'nothing left to redeliver');
      assert.equal(await deliveries('dead-lettered'), 1);
      assert.equal(await reservedOf(database.db, book), 3, 'the doomed order never applied');
      const inbox = await database.db.selectFrom('inbox').select('message_id').where('message_id', '=', doomed.messageId).execute();
      assert.deepEqual(inbox, [], 'no claim kept for it');
    },
  );

  test('an outbox event written in a transaction that rolls back is never published', { timeout: 60_000 }, async (t) => {
    const database = await target.open();
    t.after(() => database.close());
    const topology = uniqueTopology();
    const broker = await TestBroker.open(topology);
    t.after(() => broker.close());
    const tap = await broker.bindQueue(topology.amqpExchange);
    const failing = new Set<string>();
    const app = await testApp(database, {
      config: { ...topology, ...fast },
      testHooks: {
        beforeCommit: async (message) => {
          if (failing.has(message.messageId)) throw new Error('injected failure before commit');
        },
      },
    });
    t.after(() => app.close());
    const book = await seedBook(app, 10);
    const doomed = orderPlaced(book, 2);
    failing.add(doomed.messageId);
    assert.equal((await placeOrder(app, doomed)).statusCode, 500);
    const kept = orderPlaced(book, 3);
    assert.equal((await placeOrder(app, kept)).statusCode, 201);

    await eventually('the committed event', async () => ((await broker.depth(tap)) >= 1 ? true : undefined));
    await sleep(500);
    const published = (await broker.drain(tap)).map((m) => m.properties.messageId as string);
    assert.deepEqual(published, [stockEventId(RESERVE_STOCK, kept.messageId, book)]);
    const rows = await database.db.selectFrom('outbox').select('causation_id').execute();
    assert.deepEqual(
      rows.map((r) => r.causation_id),
      [kept.messageId],
      'the rolled-back event left no row',
    );
    assert.equal(await reservedOf(database.db, book), 3);
  });
});
