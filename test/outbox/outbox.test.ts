import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import Fastify from 'fastify';
import { sql } from 'kysely';
import { RESERVATION_REFUSED, STOCK_RELEASED, STOCK_RESERVED, stockEventId, stockEventsFor } from '../../src/inventory/stock-events.js';
import type { OutboxEvent as QueuedEvent, OutboxEventInput } from '../../src/outbox/outbox-event.js';
import { OutboxRelay, RelayUnavailableError, type EventPublisher, type PublishResult } from '../../src/outbox/relay.js';
import { migrateToLatest } from '../../src/schema/migrate.js';
import { claimPublishableEvents, insertOutboxEvents, markPublished } from '../../src/outbox/outbox.repository.js';
import { RELEASE_STOCK, RESERVE_STOCK } from '../../src/inventory/order.commands.js';
import { amqpUrl, eventually, skipWithoutAmqp, TestBroker, uniqueTopology } from '../support/amqp.js';
import { postgresDatabase, serverDatabases, testDatabases } from '../support/databases.js';
import {
  admin,
  cancelOrder,
  json,
  newId,
  orderPlaced,
  placeOrder,
  seedBook,
  testApp,
  type Pruned,
  type OutboxEvent,
  type Page,
} from '../support/fixtures.js';
import { sample, scrape } from '../operations/prometheus.js';

const now = new Date('2026-03-01T12:00:00.000Z');

describe('stock events', () => {
  const order = newId();
  const book = newId();
  test('a reservation, a refusal and a release each publish one event per book; ids depend on (consumer, message, book) only', () => {
    const reserved = stockEventsFor(RESERVE_STOCK, 'm-1', { result: 'reserved', orderId: order, bookId: book, quantity: 2 }, now);
    assert.equal(reserved.length, 1);
    assert.deepEqual(reserved[0], {
      id: stockEventId(RESERVE_STOCK, 'm-1', book),
      type: STOCK_RESERVED,
      source: 'urn:bookstore:inventory',
      orderingKey: book,
      consumer: RESERVE_STOCK,
      causationId: 'm-1',
      data: { orderId: order, bookId: book, quantity: 2 },
      occurredAt: now,
    });
    const again = stockEventsFor(RESERVE_STOCK, 'm-1', { result: 'reserved', orderId: order, bookId: book, quantity: 2 }, new Date());
    assert.equal(again[0]!.id, reserved[0].id, 'a redelivered command yields the same event id');
    assert.notEqual(stockEventId(RESERVE_STOCK, 'm-2', book), reserved[0].id);
    assert.notEqual(stockEventId(RELEASE_STOCK, 'm-1', book), reserved[0].id);

    const refused = stockEventsFor(
      RESERVE_STOCK,
      'm-3',
      { result: 'insufficient-stock', orderId: order, bookId: book, quantity: 9, available: 1 },
      now,
    );
    assert.deepEqual(
      refused.map((e) => [e.type, e.data]),
      [[RESERVATION_REFUSED, { orderId: order, bookId: book, quantity: 9, reason: 'insufficient-stock', available: 1 }]],
    );
    const unknown = stockEventsFor(RESERVE_STOCK, 'm-4', { result: 'unknown-book', orderId: order, bookId: book, quantity: 1 }, now);
    assert.deepEqual(
      unknown.map((e) => e.data.reason),
      ['unknown-book'],
    );

    const other = newId();
    const released = stockEventsFor(
      RELEASE_STOCK,
      'm-5',
      {
        result: 'released',
        orderId: order,
        released: [
          { bookId: book, quantity: 2 },
          { bookId: other, quantity: 1 },
        ],
      },
      now,
    );
    assert.deepEqual(
      released.map((e) => [e.type, e.orderingKey, e.data.quantity]),
      [
        [STOCK_RELEASED, book, 2],
        [STOCK_RELEASED, other, 1],
      ],
    );
    assert.equal(new Set(released.map((e) => e.id)).size, 2);

    const existing = { quantity: 2, reservedBy: 'm-1', released: false };
    assert.deepEqual(
      stockEventsFor(RESERVE_STOCK, 'm-6', { result: 'already-reserved', orderId: order, bookId: book, quantity: 2, existing }, now),
      [],
    );
    assert.deepEqual(stockEventsFor(RELEASE_STOCK, 'm-7', { result: 'not-reserved', orderId: order }, now), []);
  });
});

function event(bookId: string, causationId = `m-${newId()}`): OutboxEventInput {
  return {
    id: stockEventId(RESERVE_STOCK, causationId, bookId),
    type: STOCK_RESERVED,
    source: 'urn:bookstore:inventory',
    orderingKey: bookId,
    consumer: RESERVE_STOCK,
    causationId,
    data: { bookId },
    occurredAt: now,
  };
}

/**
 * The broker, scripted: confirms every event it is handed except those listed, which it refuses (nack)
 * the first time. Records each publish call, in order, as the ids it was handed.
 */
class ScriptedBroker implements EventPublisher {
  readonly ready = true;
  readonly calls: string[][] = [];
  constructor(private readonly refuseOnce: Set<string>) {}

  publish(events: readonly QueuedEvent[]): Promise<PublishResult[]> {
    this.calls.push(events.map((e) => e.id));
    return Promise.resolve(
      events.map((e) => (this.refuseOnce.delete(e.id) ? { id: e.id, error: 'refused by the broker (nack)' } : { id: e.id })),
    );
  }
}

for (const target of testDatabases) {
  describe(`outbox on ${target.name}`, () => {
    test(
      'each event and each reservation writes only the index entries some query reads',
      { skip: target.name === 'mssql' && "pg_indexes is PostgreSQL's" },
      async (t) => {
        const database = await target.open();
        t.after(() => database.close());
        const app = await testApp(database);
        t.after(() => app.close());
        if (target.name === 'mysql') {
          // The primary key's index is PRIMARY; seq keeps its unique key, which AUTO_INCREMENT needs.
          const { rows } = await sql<{ t: string; i: string }>`
          select distinct table_name as t, index_name as i from information_schema.statistics
          where table_schema = database() and table_name in ('outbox', 'stock_reservations') order by 1, 2`.execute(app.db);
          assert.deepEqual(
            rows.map((r) => `${r.t}.${r.i}`),
            [
              'outbox.outbox_pending',
              'outbox.outbox_pending_by_key',
              'outbox.outbox_published_at',
              'outbox.outbox_seq',
              'outbox.PRIMARY',
              'stock_reservations.PRIMARY',
            ],
          );
          return;
        }
        const { rows } = await sql<{ tablename: string; indexname: string }>`
        select tablename, indexname from pg_indexes where tablename in ('outbox', 'stock_reservations') order by 1, 2`.execute(app.db);
        assert.deepEqual(
          rows.map((r) => `${r.tablename}.${r.indexname}`),
          [
            'outbox.outbox_pending',
            'outbox.outbox_pending_by_key',
            'outbox.outbox_pk',
            'outbox.outbox_published_at',
            'stock_reservations.stock_reservations_pk',
          ],
        );
      },
    );

    test('commands write their events in their transaction, without AMQP_URL too; a replay writes none', async (t) => {
      const database = await target.open();
      t.after(() => database.close());
      const app = await testApp(database);
      t.after(() => app.close());
      assert.equal(app.messaging.relay, undefined, 'no relay without AMQP_URL');

      const book = await seedBook(app, 5);
      const placed = orderPlaced(book, 2);
      assert.equal((await placeOrder(app, placed)).statusCode, 201);
      assert.equal((await placeOrder(app, placed)).statusCode, 200);
      assert.equal((await placeOrder(app, orderPlaced(book, 9))).statusCode, 201, 'refused: insufficient stock');
      assert.equal((await cancelOrder(app, { messageId: `c-${newId()}`, data: { orderId: placed.data.orderId } })).statusCode, 201);

      const listed = json<Page<OutboxEvent>>(await app.inject({ url: '/outbox', headers: admin }));
      assert.deepEqual(
        listed.items.map((e) => [e.type, (e.data as { quantity: number }).quantity]),
        [
          [STOCK_RESERVED, 2],
          [RESERVATION_REFUSED, 9],
          [STOCK_RELEASED, 2],
        ],
      );
      assert.equal(listed.items[0]?.id, stockEventId(RESERVE_STOCK, placed.messageId, book));
      assert.equal(listed.items[0]?.attempts, 0);
      assert.deepEqual(json<Page<OutboxEvent>>(await app.inject({ url: '/outbox?state=failed', headers: admin })).items, []);
      const page = json<Page<OutboxEvent>>(await app.inject({ url: '/outbox?limit=2', headers: admin }));
      assert.equal(page.items.length, 2);
      const rest = json<Page<OutboxEvent>>(await app.inject({ url: `/outbox?limit=2&after=${page.nextAfter}`, headers: admin }));
      assert.deepEqual(
        rest.items.map((e) => e.type),
        [STOCK_RELEASED],
      );
      assert.equal(rest.nextAfter, null);
      assert.equal((await app.inject({ url: '/outbox' })).statusCode, 401, 'admin only');

      const metrics = await scrape(app);
      assert.equal(sample(metrics, 'outbox_pending_events'), 3);
      assert.ok(sample(metrics, 'outbox_oldest_pending_age_seconds')! >= 0);
    });

    test('inserting an event id twice keeps one row; an empty list writes nothing', async (t) => {
      const database = await target.open();
      t.after(() => database.close());
      await migrateToLatest(database.db);
      const book = newId();
      const one = event(book);
      await database.db.transaction().execute(async (trx) => {
        await insertOutboxEvents(trx, []);
        await insertOutboxEvents(trx, [one, event(book)]);
        await insertOutboxEvents(trx, [one]);
      });
      const rows = await database.db.selectFrom('outbox').select('id').execute();
      assert.equal(rows.length, 2);
    });

    test("an event the broker refuses stops its book for the batch: the book's later events are never handed over before it; other books go on", async (t) => {
      const database = await target.open();
      t.after(() => database.close());
      await migrateToLatest(database.db);
      const [a, b] = [newId(), newId()];
      const [a1, b1, a2, b2, a3] = [event(a), event(b), event(a), event(b), event(a)];
      const order = [a1, b1, a2, b2, a3].map((e) => e.id);
      await database.db.transaction().execute((trx) => insertOutboxEvents(trx, [a1, b1, a2, b2, a3]));
      const broker = new ScriptedBroker(new Set([a2.id]));
      const relay = new OutboxRelay({
        db: database.db,
        publisher: broker,
        log: Fastify({ logger: false }).log,
        now: () => now,
        batchSize: 10,
        intervalMs: 1000,
        maxBackoffMs: 1000,
        publishTimeoutMs: 1000,
      });

      await assert.rejects(relay.relayOnce(), RelayUnavailableError);
      assert.deepEqual(broker.calls, [
        [a1.id, b1.id],
        [a2.id, b2.id],
      ]);
      const state = async () =>
        Object.fromEntries(
          (await database.db.selectFrom('outbox').select(['id', 'published_at', 'attempts', 'last_error']).execute()).map((r) => [
            r.id,
            [r.published_at === null ? 'pending' : 'published', r.attempts, r.last_error],
          ]),
        );
      assert.deepEqual(await state(), {
        [a1.id]: ['published', 1, null],
        [b1.id]: ['published', 1, null],
        [a2.id]: ['pending', 1, 'refused by the broker (nack)'],
        [b2.id]: ['published', 1, null],
        [a3.id]: ['pending', 0, null],
      });

      assert.equal(await relay.relayOnce(), 2);
      assert.deepEqual(broker.calls.slice(2), [[a2.id], [a3.id]]);
      const handed = broker.calls.flat();
      for (const book of [a, b]) {
        const positions = handed
          .filter((id) => [a1, b1, a2, b2, a3].find((e) => e.id === id)!.orderingKey === book)
          .map((id) => order.indexOf(id));
        assert.deepEqual(
          positions,
          [...positions].sort((x, y) => x - y),
          `book ${book}: what the broker was handed never goes back`,
        );
      }
      assert.deepEqual(await state(), {
        [a1.id]: ['published', 1, null],
        [b1.id]: ['published', 1, null],
        [a2.id]: ['published', 2, null],
        [b2.id]: ['published', 1, null],
        [a3.id]: ['published', 1, null],
      });
    });

    test('retention prunes published events past OUTBOX_RETENTION_DAYS and never a pending one', async (t) => {
      const database = await target.open();
      t.after(() => database.close());
      let clock = Date.parse('2026-01-01T00:00:00Z');
      const app = await testApp(database, { now: () => new Date(clock) });
      t.after(() => app.close());
      const book = newId();
      const [old, recent, pending] = [event(book), event(book), event(book)];
      await database.db.transaction().execute(async (trx) => {
        await insertOutboxEvents(trx, [old, recent, pending]);
        await markPublished(trx, [old.id], new Date(clock - 10 * 86_400_000));
        await markPublished(trx, [recent.id], new Date(clock - 2 * 86_400_000));
      });
      const res = await app.inject({ method: 'POST', url: '/inbox/prune', headers: admin });
      assert.equal(json<Pruned>(res).outbox, 1);
      const left = await database.db.selectFrom('outbox').select('id').orderBy('seq').execute();
      assert.deepEqual(
        left.map((r) => r.id),
        [recent.id, pending.id],
      );
      clock += 365 * 86_400_000;
      await app.inject({ method: 'POST', url: '/inbox/prune', headers: admin });
      assert.deepEqual(
        (await database.db.selectFrom('outbox').select('id').execute()).map((r) => r.id),
        [pending.id],
        'pending: kept however old',
      );
    });
  });
}

for (const target of serverDatabases) {
  describe(`outbox claims on ${target.name}`, () => {
    test("two relays claim disjoint events, and neither publishes a book's event while an older one of that book is held elsewhere", async (t) => {
      const database = await target.open();
      t.after(() => database.close());
      await migrateToLatest(database.db);
      const [b1, b2, b3] = [newId(), newId(), newId()];
      const events = [event(b1), event(b2), event(b1), event(b3)];
      await database.db.transaction().execute((trx) => insertOutboxEvents(trx, events));

      let releaseFirst!: () => void;
      const firstHolds = new Promise<void>((resolve) => (releaseFirst = resolve));
      let firstClaimed!: (ids: string[]) => void;
      const claimedByFirst = new Promise<string[]>((resolve) => (firstClaimed = resolve));
      const first = database.db.transaction().execute(async (trx) => {
        const claimed = await claimPublishableEvents(trx, 2);
        firstClaimed(claimed.map((e) => e.id));
        await firstHolds;
      });
      assert.deepEqual(await claimedByFirst, [events[0]!.id, events[1]!.id]);
      const second = await database.db.transaction().execute((trx) => claimPublishableEvents(trx, 10));
      assert.deepEqual(
        second.map((e) => e.id),
        [events[3]!.id],
        "skips the rows the first holds, and holds back b1's second event until b1's first is published",
      );
      releaseFirst();
      await first;
      const all = await database.db.transaction().execute((trx) => claimPublishableEvents(trx, 10));
      assert.deepEqual(
        all.map((e) => e.id),
        events.map((e) => e.id),
        'one relay holding all of a book publishes them in order',
      );
      await database.db.transaction().execute((trx) => markPublished(trx, [events[0]!.id], now));
      const next = await database.db.transaction().execute((trx) => claimPublishableEvents(trx, 10));
      assert.deepEqual(
        next.map((e) => e.id),
        [events[1]!.id, events[2]!.id, events[3]!.id],
      );
    });
  });
}

describe(`the relay on a real RabbitMQ (${(postgresDatabase ?? testDatabases[0]!).name})`, { skip: skipWithoutAmqp }, () => {
  test(
    'an event the broker refuses (nack) stays pending, is listed as failed, and goes again before the later events of its book',
    { timeout: 60_000 },
    async (t) => {
      const database = await (postgresDatabase ?? testDatabases[0]!).open();
      t.after(() => database.close());
      const topology = uniqueTopology();
      const broker = await TestBroker.open(topology);
      t.after(() => broker.close());
      // A queue that holds one message and refuses more: the broker nacks what does not fit.
      const full = `${topology.amqpExchange}.one-slot`;
      await broker.channel.assertQueue(full, { durable: false, arguments: { 'x-max-length': 1, 'x-overflow': 'reject-publish' } });
      await broker.channel.bindQueue(full, topology.amqpExchange, '#');
      t.after(() =>
        broker.channel.deleteQueue(full).then(
          () => undefined,
          () => undefined,
        ),
      );

      const app = await testApp(database, {
        config: { ...topology, amqpUrl, outboxRelayIntervalMs: 100, outboxRelayMaxBackoffMs: 300, outboxRelayBatchSize: 1 },
      });
      t.after(() => app.close());
      await app.messaging.relay!.stop(); // batches are driven by hand below
      const book = await seedBook(app, 10);
      const orders = [orderPlaced(book, 1), orderPlaced(book, 1), orderPlaced(book, 1)];
      for (const o of orders) assert.equal((await placeOrder(app, o)).statusCode, 201);
      const ids = orders.map((o) => stockEventId(RESERVE_STOCK, o.messageId, book));

      await eventually('the publisher connected', async () => (app.messaging.publisher!.ready ? true : undefined));
      // One event per batch: the first fits.
      assert.equal(await app.messaging.relay!.relayOnce(), 1);
      await assert.rejects(app.messaging.relay!.relayOnce(), /not confirmed|nack/i, 'the second is refused');
      const failed = json<Page<OutboxEvent>>(await app.inject({ url: '/outbox?state=failed', headers: admin }));
      assert.deepEqual(
        failed.items.map((e) => e.id),
        [ids[1]],
      );
      assert.match(String(failed.items[0]?.lastError), /nack/i);
      assert.equal(failed.items[0]?.attempts, 1);
      assert.equal(sample(await scrape(app), 'outbox_publish_failures_total'), 1);

      const received: string[] = [];
      for (let i = 0; i < 20 && received.length < 3; i++) {
        received.push(...(await broker.drain(full)).map((m) => m.properties.messageId as string));
        await app.messaging.relay!.relayOnce().catch(() => 0);
      }
      received.push(...(await broker.drain(full)).map((m) => m.properties.messageId as string));
      assert.deepEqual(received, ids, 'each published once it fits, in order');
      assert.deepEqual(json<Page<OutboxEvent>>(await app.inject({ url: '/outbox', headers: admin })).items, []);
      const rows = await database.db
        .selectFrom('outbox')
        .select(['id', 'attempts', sql<boolean>`published_at is not null`.as('published')])
        .execute();
      assert.ok(rows.every((r) => r.published));
      assert.equal(rows.find((r) => r.id === ids[1])!.attempts, 2, 'refused once, then confirmed');
    },
  );
});
