import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import type { Db } from '../../src/schema/database.js';
import type { SeamMessage } from '../../src/plugins/test-seams.js';
import { RESERVATION_REFUSED } from '../../src/inventory/stock-events.js';
import { testDatabases, type TestDatabaseHandle } from '../support/databases.js';
import { cancelOrder, json, newId, orderPlaced, placeOrder, seedBook, stockRow, testApp, type CommandAnswer } from '../support/fixtures.js';
import { eventually } from '../support/observe.js';

/** The events a message put in the outbox: type and data (JSON columns read back parsed on every database). */
async function eventsOf(db: Db, messageId: string): Promise<{ type: string; data: unknown }[]> {
  const rows = await db.selectFrom('outbox').select(['type', 'data']).where('causation_id', '=', messageId).orderBy('seq').execute();
  return rows.map((r) => ({ type: r.type, data: r.data }));
}

async function reservationsOf(db: Db, orderId: string) {
  return db.selectFrom('stock_reservations').selectAll().where('order_id', '=', orderId).execute();
}

/**
 * Redelivery and requeueing reorder messages: an OrderCancelled can be processed before the
 * OrderPlaced of its order. The cancellation must still win: the late placement is refused.
 */
for (const target of testDatabases) {
  describe(`a cancellation processed before its order, on ${target.name}`, { timeout: 120_000 }, () => {
    let database: TestDatabaseHandle;
    let app: FastifyInstance;

    before(async () => {
      database = await target.open();
      app = await testApp(database);
    });
    after(async () => {
      await app?.close();
      await database?.close();
    });

    test('cancel first: 201 not-reserved; the late placement: 201 order-cancelled, nothing reserved, a refusal event; its redelivery: 200 the same', async () => {
      const book = await seedBook(app, 10);
      const placed = orderPlaced(book, 3);
      const cancel = { messageId: `cancel-${newId()}`, data: { orderId: placed.data.orderId } };

      const cancelled = await cancelOrder(app, cancel);
      assert.equal(cancelled.statusCode, 201);
      assert.deepEqual(json<CommandAnswer>(cancelled).outcome, { result: 'not-reserved', orderId: placed.data.orderId });

      const late = await placeOrder(app, placed);
      assert.equal(late.statusCode, 201);
      const refusal = { result: 'order-cancelled', ...placed.data, cancelledBy: cancel.messageId };
      assert.deepEqual(json<CommandAnswer>(late).outcome, refusal);
      assert.deepEqual(await stockRow(database.db, book), { on_hand: 10, reserved: 0 });
      assert.deepEqual(await reservationsOf(database.db, placed.data.orderId), [], 'no reservation row for a cancelled order');
      assert.deepEqual(await eventsOf(database.db, placed.messageId), [
        { type: RESERVATION_REFUSED, data: { ...placed.data, reason: 'order-cancelled' } },
      ]);

      const redelivered = await placeOrder(app, placed);
      assert.equal(redelivered.statusCode, 200);
      assert.equal(redelivered.headers['idempotent-replayed'], 'true');
      assert.deepEqual(json<CommandAnswer>(redelivered).outcome, refusal);
      assert.equal((await eventsOf(database.db, placed.messageId)).length, 1, 'the replay publishes nothing new');
      assert.deepEqual(await stockRow(database.db, book), { on_hand: 10, reserved: 0 });
    });

    test('a cancellation of the whole order refuses every later line of it, even one for a book it never reserved', async () => {
      const [dune, emma] = [await seedBook(app, 10), await seedBook(app, 10, newId(), 'Emma')];
      const orderId = newId();
      const first = orderPlaced(dune, 2, undefined, orderId);
      assert.equal(json<CommandAnswer>(await placeOrder(app, first)).outcome.result, 'reserved');

      const cancel = await cancelOrder(app, { messageId: `cancel-${newId()}`, data: { orderId } });
      assert.deepEqual(json<CommandAnswer>(cancel).outcome.released, [{ bookId: dune, quantity: 2 }]);

      const lateLine = await placeOrder(app, orderPlaced(emma, 1, undefined, orderId));
      assert.equal(json<CommandAnswer>(lateLine).outcome.result, 'order-cancelled');
      // Reserve, cancel, then a placement of the released line under a new message id (a producer duplicate):
      // the order is cancelled, so it is refused as such, not answered already-reserved as if stock were held.
      const duplicate = orderPlaced(dune, 2, undefined, orderId);
      const producerDuplicate = await placeOrder(app, duplicate);
      assert.equal(producerDuplicate.statusCode, 201);
      assert.deepEqual(json<CommandAnswer>(producerDuplicate).outcome, {
        result: 'order-cancelled',
        ...duplicate.data,
        cancelledBy: json<CommandAnswer>(cancel).messageId,
      });
      assert.deepEqual(await eventsOf(database.db, duplicate.messageId), [
        { type: RESERVATION_REFUSED, data: { ...duplicate.data, reason: 'order-cancelled' } },
      ]);
      const lines = await reservationsOf(database.db, orderId);
      assert.equal(lines.length, 1, 'the released line only: nothing reserved again');
      assert.notEqual(lines[0]!.released_at, null);
      assert.deepEqual(await stockRow(database.db, dune), { on_hand: 10, reserved: 0 });
      assert.deepEqual(await stockRow(database.db, emma), { on_hand: 10, reserved: 0 });
    });

    test("a cancellation of one book refuses that line only: the order's other books still reserve", async () => {
      const [dune, emma] = [await seedBook(app, 10), await seedBook(app, 10, newId(), 'Emma')];
      const orderId = newId();
      const cancel = await cancelOrder(app, { messageId: `cancel-${newId()}`, data: { orderId, bookId: dune } });
      assert.equal(json<CommandAnswer>(cancel).outcome.result, 'not-reserved');

      assert.equal(json<CommandAnswer>(await placeOrder(app, orderPlaced(dune, 2, undefined, orderId))).outcome.result, 'order-cancelled');
      assert.equal(json<CommandAnswer>(await placeOrder(app, orderPlaced(emma, 2, undefined, orderId))).outcome.result, 'reserved');
      assert.deepEqual(await stockRow(database.db, dune), { on_hand: 10, reserved: 0 });
      assert.deepEqual(await stockRow(database.db, emma), { on_hand: 10, reserved: 2 });
    });

    test('in a batch: the order cancelled before is refused, the others in the same transaction reserve', async (t) => {
      // A transaction held open before its commit, so the placements sent meanwhile queue and commit together.
      const blockerId = `blocker-${newId()}`;
      let reached = false;
      let release!: () => void;
      const released = new Promise<void>((resolve) => (release = resolve));
      const batching = await testApp(database, {
        config: { inboxBatchConcurrency: 1 },
        testHooks: {
          beforeCommit: async (message: SeamMessage) => {
            if (message.messageId !== blockerId) return;
            reached = true;
            await released;
          },
        },
      });
      t.after(async () => {
        release();
        await batching.close();
      });
      const book = await seedBook(batching, 10);
      const orders = [orderPlaced(book, 1), orderPlaced(book, 2), orderPlaced(book, 3)];
      const cancel = { messageId: `cancel-${newId()}`, data: { orderId: orders[1]!.data.orderId } };
      assert.equal((await cancelOrder(batching, cancel)).statusCode, 201);

      const blocker = placeOrder(batching, orderPlaced(book, 1, blockerId));
      assert.ok(await eventually(() => reached), 'the blocking transaction is held');
      const answers: Promise<LightMyRequestResponse>[] = [];
      for (const message of orders) {
        const queued = batching.commands.queued;
        answers.push(placeOrder(batching, message));
        assert.ok(await eventually(() => batching.commands.queued > queued), 'the placement queues');
      }
      release();
      assert.equal((await blocker).statusCode, 201);
      const outcomes = (await Promise.all(answers)).map((a) => json<CommandAnswer>(a).outcome);

      assert.deepEqual(
        outcomes.map((o) => o.result),
        ['reserved', 'order-cancelled', 'reserved'],
      );
      assert.deepEqual(await stockRow(database.db, book), { on_hand: 10, reserved: 1 + 1 + 3 });
      assert.deepEqual(await reservationsOf(database.db, orders[1]!.data.orderId), []);
      assert.deepEqual(await eventsOf(database.db, orders[1]!.messageId), [
        { type: RESERVATION_REFUSED, data: { ...orders[1]!.data, reason: 'order-cancelled' } },
      ]);
      const replay = await placeOrder(batching, orders[1]);
      assert.equal(replay.statusCode, 200);
      assert.equal(json<CommandAnswer>(replay).outcome.result, 'order-cancelled');
    });
  });
}
