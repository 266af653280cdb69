import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { stockEventId, STOCK_RESERVED } from '../../src/inventory/stock-events.js';
import { RESERVE_STOCK } from '../../src/inventory/order.commands.js';
import { eventBody, eventually, skipWithoutAmqp, TestBroker, uniqueTopology } from '../support/amqp.js';
import { serverDatabases, testDatabases, type TestDatabaseHandle } from '../support/databases.js';
import {
  admin,
  json,
  newId,
  orderPlaced,
  reservedOf,
  seedBook,
  testApp,
  type InboxRecord,
  type DeadLetter,
  type Page,
} from '../support/fixtures.js';
import { sample, scrape } from '../operations/prometheus.js';
import { apiKeyDigest } from '../../src/producer-config.js';

/**
 * Commands over RabbitMQ: the same inbox as HTTP, acked after commit, duplicates acked with nothing
 * applied, poison dead-lettered (table and exchange) and never redelivered. Real broker, real database:
 * each database server the suite has (PostgreSQL, MariaDB/MySQL, SQL Server), the embedded one without them.
 */

const targets = serverDatabases.length > 0 ? serverDatabases : [testDatabases[0]!];

for (const target of targets) {
  describe(`AMQP command consumers (${target.name})`, { skip: skipWithoutAmqp }, () => {
    let database: TestDatabaseHandle;
    let app: FastifyInstance;
    let broker: TestBroker;
    let events: string;
    let deadLetters: string;

    before(async () => {
      database = await target.open();
      const topology = uniqueTopology();
      broker = await TestBroker.open(topology);
      events = await broker.bindQueue(topology.amqpExchange);
      deadLetters = await broker.bindQueue(topology.amqpDeadLetterExchange);
      app = await testApp(database, { config: { ...topology, amqpRetryDelayMs: 50, outboxRelayIntervalMs: 100 } });
    });
    after(async () => {
      await app?.close();
      await broker?.close();
      await database?.close();
    });

    async function deliveries(result: string): Promise<number> {
      return sample(await scrape(app), 'amqp_command_deliveries_total', { queue: broker.topology.amqpOrderPlacedQueue, result }) ?? 0;
    }

    test('an order published twice reserves once; one stock-reserved event reaches a bound queue, its id as message-id', async () => {
      assert.equal(
        sample(await scrape(app), 'amqp_command_deliveries_total', {
          queue: broker.topology.amqpOrderCancelledQueue,
          result: 'dead-lettered',
        }),
        0,
        'every queue and settlement is a series from the start',
      );
      const book = await seedBook(app, 10);
      const message = orderPlaced(book, 3);
      const processedBefore = await deliveries('processed');
      const duplicatesBefore = await deliveries('duplicate');
      broker.send(broker.topology.amqpOrderPlacedQueue, message);
      broker.send(broker.topology.amqpOrderPlacedQueue, message);

      await eventually('both copies settled', async () => ((await deliveries('duplicate')) > duplicatesBefore ? true : undefined));
      assert.equal((await deliveries('processed')) - processedBefore, 1, 'one copy processed');
      assert.equal((await deliveries('duplicate')) - duplicatesBefore, 1, 'the other acked as a duplicate');
      assert.equal(await reservedOf(app.db, book), 3, 'reserved once');
      assert.equal(await broker.depth(broker.topology.amqpOrderPlacedQueue), 0, 'both acked: nothing left to redeliver');

      const record = json<InboxRecord>(
        await app.inject({ method: 'GET', url: `/inbox/${RESERVE_STOCK}/${message.messageId}`, headers: admin }),
      );
      assert.equal(record.keySource, 'body');
      assert.equal(record.outcome?.result, 'reserved');

      const published = await eventually('the event', async () => {
        const got = await broker.drain(events);
        return got.length > 0 ? got : undefined;
      });
      await new Promise((r) => setTimeout(r, 300));
      const all = [...published, ...(await broker.drain(events))].filter((m) => eventBody(m).data.orderId === message.data.orderId);
      assert.equal(all.length, 1, 'one event for one reservation');
      const event = all[0]!;
      const expectedId = stockEventId(RESERVE_STOCK, message.messageId, book);
      assert.equal(event.properties.messageId, expectedId);
      assert.equal(event.fields.routingKey, STOCK_RESERVED);
      assert.equal(event.properties.deliveryMode, 2, 'persistent');
      const body = eventBody(event);
      assert.deepEqual(
        { id: body.id, type: body.type, causationid: body.causationid, data: body.data },
        { id: expectedId, type: STOCK_RESERVED, causationid: message.messageId, data: message.data },
      );
      const row = await app.db.selectFrom('outbox').selectAll().where('id', '=', expectedId).executeTakeFirstOrThrow();
      assert.notEqual(row.published_at, null, 'marked published once confirmed');
    });

    test('the key may come from the AMQP message-id property; a property that disagrees with messageId is dead-lettered', async () => {
      const book = await seedBook(app, 10);
      const viaProperty = orderPlaced(book, 1);
      broker.send(broker.topology.amqpOrderPlacedQueue, { data: viaProperty.data }, { messageId: viaProperty.messageId });
      const record = await eventually('the inbox record', async () => {
        const res = await app.inject({ method: 'GET', url: `/inbox/${RESERVE_STOCK}/${viaProperty.messageId}`, headers: admin });
        return res.statusCode === 200 ? json<InboxRecord>(res) : undefined;
      });
      assert.equal(record.keySource, 'amqp-message-id');
      assert.equal(await reservedOf(app.db, book), 1);

      const conflicting = orderPlaced(book, 2);
      broker.send(broker.topology.amqpOrderPlacedQueue, conflicting, { messageId: `other-${newId()}` });
      const letter = await eventually('the dead letter', () =>
        app.db.selectFrom('dead_letters').selectAll().where('message_id', '=', conflicting.messageId).executeTakeFirst(),
      );
      assert.equal(letter.reason, 'conflicting-message-keys');
      assert.equal(await reservedOf(app.db, book), 1, 'nothing applied');
    });

    test('poison messages: dead-letter table and dead-letter exchange, never redelivered, nothing applied', async () => {
      const book = await seedBook(app, 10);
      const queue = broker.topology.amqpOrderPlacedQueue;
      await broker.drain(deadLetters);
      const before = await deliveries('dead-lettered');

      const notJson = `not-json-${newId()}`;
      broker.send(queue, Buffer.from('{"messageId": "x", "data": '), { messageId: notJson });
      const schemaViolation = orderPlaced(book, 2);
      broker.send(queue, { ...schemaViolation, data: { ...schemaViolation.data, quantity: '2' } });
      const first = orderPlaced(book, 2);
      broker.send(queue, first);
      await eventually('the first order applied', async () => ((await reservedOf(app.db, book)) === 2 ? true : undefined));
      broker.send(queue, { ...first, data: { ...first.data, quantity: 5 } });

      await eventually('three dead letters', async () => ((await deliveries('dead-lettered')) - before >= 3 ? true : undefined));
      const rows = await app.db
        .selectFrom('dead_letters')
        .select(['message_id', 'reason', 'key_source'])
        .where('message_id', 'in', [notJson, schemaViolation.messageId, first.messageId])
        .execute();
      const reasons = Object.fromEntries(rows.map((r) => [r.message_id, r.reason]));
      assert.deepEqual(reasons, {
        [notJson]: 'malformed-json',
        [schemaViolation.messageId]: 'invalid-request',
        [first.messageId]: 'fingerprint-mismatch',
      });
      assert.equal(await reservedOf(app.db, book), 2, 'only the valid first copy applied');

      const dead = await eventually('the dead-lettered messages', async () => {
        const got = await broker.drain(deadLetters);
        return got.length >= 3 ? got : undefined;
      });
      assert.equal(dead.length, 3);
      for (const message of dead) {
        const death = (message.properties.headers?.['x-death'] as { reason: string; queue: string }[] | undefined)?.[0];
        assert.equal(death?.reason, 'rejected');
        assert.equal(death?.queue, queue);
      }
      await new Promise((r) => setTimeout(r, 500));
      assert.equal((await deliveries('dead-lettered')) - before, 3, 'each rejected once: no redelivery loop');
      assert.equal(await broker.depth(queue), 0);
      assert.equal((await broker.drain(deadLetters)).length, 0);

      const listed = json<Page<DeadLetter>>(
        await app.inject({ method: 'GET', url: `/dead-letters?consumer=${RESERVE_STOCK}`, headers: admin }),
      );
      const listedNotJson = listed.items.find((l) => l.messageId === notJson);
      assert.ok(listedNotJson, 'the message that is not JSON is listed');
      assert.equal(listedNotJson.keySource, 'amqp-message-id');
      // A body that is not JSON is kept as its bytes, in base64.
      const { base64 } = listedNotJson.payload as { base64: string };
      assert.equal(Buffer.from(base64, 'base64').toString(), '{"messageId": "x", "data": ');
    });
  });

  describe(`AMQP command queues as one producer's (AMQP_PRODUCER, ${target.name})`, { skip: skipWithoutAmqp }, () => {
    let database: TestDatabaseHandle;
    let app: FastifyInstance;
    let broker: TestBroker;
    const BOB_KEY = 'b'.repeat(43);

    before(async () => {
      database = await target.open();
      const topology = uniqueTopology();
      broker = await TestBroker.open(topology);
      app = await testApp(database, {
        config: {
          ...topology,
          amqpProducer: 'orders',
          producers: [{ id: 'bob', apiKeySha256: [apiKeyDigest(BOB_KEY)], webhookSecrets: [], rateLimitMax: undefined }],
          amqpRetryDelayMs: 50,
          outboxRelayIntervalMs: 100,
        },
      });
    });
    after(async () => {
      await app?.close();
      await broker?.close();
      await database?.close();
    });

    test("a queue's messages are recorded under the producer's keys; an HTTP producer that used the id first blocks nothing", async () => {
      const book = await seedBook(app, 10);
      const message = orderPlaced(book, 3);
      const squat = await app.inject({
        method: 'POST',
        url: '/inventory/order-placed',
        headers: { authorization: `Bearer ${BOB_KEY}` },
        payload: orderPlaced(book, 1, message.messageId),
      });
      assert.equal(squat.statusCode, 201, squat.body);

      broker.send(broker.topology.amqpOrderPlacedQueue, message);
      const record = await eventually('the inbox record', async () => {
        const url = `/inbox/${RESERVE_STOCK}/${encodeURIComponent(`orders ${message.messageId}`)}`;
        const res = await app.inject({ method: 'GET', url, headers: admin });
        return res.statusCode === 200 ? json<InboxRecord>(res) : undefined;
      });
      assert.equal(record.outcome?.result, 'reserved');
      assert.equal(await reservedOf(app.db, book), 4, "Bob's 1 and the queue's 3");
      const letters = await app.db.selectFrom('dead_letters').selectAll().execute();
      assert.deepEqual(letters, [], 'not taken for a reused key');
    });
  });

  describe(`dead letters of a producer's queue (AMQP_PRODUCER, ${target.name})`, { skip: skipWithoutAmqp }, () => {
    let database: TestDatabaseHandle;
    let app: FastifyInstance;
    let broker: TestBroker;
    /** Keys whose command fails unexpectedly before its commit, on every delivery. */
    const failing = new Set<string>();

    before(async () => {
      database = await target.open();
      const topology = uniqueTopology();
      broker = await TestBroker.open(topology);
      // No HTTP credentials: anonymous commands on loopback record unscoped keys, as a legacy sender's do.
      app = await testApp(database, {
        config: { ...topology, amqpProducer: 'orders', amqpRetryDelayMs: 50, amqpMaxDeliveries: 2, outboxRelayIntervalMs: 100 },
        testHooks: {
          beforeCommit: async (message) => {
            if (failing.has(message.messageId)) throw new Error('injected failure before commit');
          },
        },
      });
    });
    after(async () => {
      await app?.close();
      await broker?.close();
      await database?.close();
    });

    async function letterOf(reason: string, book: string): Promise<DeadLetter> {
      return eventually(`the ${reason} letter`, async () => {
        const page = json<Page<DeadLetter>>(await app.inject({ url: `/dead-letters?consumer=${RESERVE_STOCK}`, headers: admin }));
        return page.items.find((l) => l.reason === reason && (l.payload as { data?: { bookId?: string } }).data?.bookId === book);
      });
    }

    async function deliveries(result: string): Promise<number> {
      return sample(await scrape(app), 'amqp_command_deliveries_total', { queue: broker.topology.amqpOrderPlacedQueue, result }) ?? 0;
    }

    test("a letter refused before it was keyed carries the producer's key, is found and replayed under it, not under the bare id another sender used", async () => {
      const book = await seedBook(app, 10);
      const id = `x1-${newId()}`;
      // Another sender (unscoped) used the bare id first.
      const other = await app.inject({ method: 'POST', url: '/inventory/order-placed', payload: orderPlaced(book, 1, id) });
      assert.equal(other.statusCode, 201, other.body);

      const message = orderPlaced(book, 3, id);
      broker.send(broker.topology.amqpOrderPlacedQueue, message, { messageId: `another-${id}` });
      const letter = await letterOf('conflicting-message-keys', book);
      assert.equal(letter.messageId, `orders ${id}`);

      const found = await app.inject({ url: `/dead-letters/search?messageId=${encodeURIComponent(`orders ${id}`)}`, headers: admin });
      assert.equal(found.statusCode, 200, found.body);
      assert.deepEqual(
        json<{ items: { id: string }[] }>(found).items.map((l) => l.id),
        [letter.id],
        'a scoped key is a search key',
      );

      const replay = await app.inject({ method: 'POST', url: `/dead-letters/${letter.id}/replay`, headers: admin });
      assert.equal(replay.statusCode, 200, replay.body);
      const replayed = json<{ result: string; messageId: string; outcome: { result: string; orderId: string } }>(replay);
      assert.equal(replayed.result, 'processed', "not a duplicate answered with the other sender's outcome");
      assert.equal(replayed.messageId, `orders ${id}`);
      assert.deepEqual([replayed.outcome.result, replayed.outcome.orderId], ['reserved', message.data.orderId]);
      assert.equal(await reservedOf(app.db, book), 4, "the other sender's 1 and the replayed 3");

      // The producer's own copy, now keyed as it should be, is a duplicate of the replay.
      const duplicatesBefore = await deliveries('duplicate');
      broker.send(broker.topology.amqpOrderPlacedQueue, message);
      await eventually('the copy settled', async () => ((await deliveries('duplicate')) === duplicatesBefore + 1 ? true : undefined));
      assert.equal(await reservedOf(app.db, book), 4, 'not reserved again');
      const keys = await app.db
        .selectFrom('inbox')
        .select('message_id')
        .where('message_id', 'in', [id, `orders ${id}`])
        .execute();
      assert.deepEqual(keys.map((k) => k.message_id).sort(), [`orders ${id}`, id]);
    });

    test("a delivery-limit letter carries the producer's key and its replay runs under it: the queue's copy is then a duplicate", async () => {
      const book = await seedBook(app, 10);
      const message = orderPlaced(book, 2);
      failing.add(`orders ${message.messageId}`);
      broker.send(broker.topology.amqpOrderPlacedQueue, message);
      const letter = await letterOf('delivery-limit', book);
      assert.equal(letter.messageId, `orders ${message.messageId}`);
      assert.equal(await reservedOf(app.db, book), 0);

      failing.delete(`orders ${message.messageId}`);
      const replay = await app.inject({ method: 'POST', url: `/dead-letters/${letter.id}/replay`, headers: admin });
      assert.equal(replay.statusCode, 200, replay.body);
      assert.deepEqual((({ result, messageId }) => ({ result, messageId }))(json<{ result: string; messageId: string }>(replay)), {
        result: 'processed',
        messageId: `orders ${message.messageId}`,
      });
      const duplicatesBefore = await deliveries('duplicate');
      broker.send(broker.topology.amqpOrderPlacedQueue, message);
      await eventually('the copy settled', async () => ((await deliveries('duplicate')) === duplicatesBefore + 1 ? true : undefined));
      assert.equal(await reservedOf(app.db, book), 2, 'reserved once');
      const bare = await app.db.selectFrom('inbox').select('message_id').where('message_id', '=', message.messageId).execute();
      assert.deepEqual(bare, [], 'nothing recorded under the bare id');
    });
  });
}
