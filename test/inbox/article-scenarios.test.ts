import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { sql } from 'kysely';
import type { Db } from '../../src/schema/database.js';
import { reportMissingDatabases, type TestDatabaseHandle, testDatabases } from '../support/databases.js';
import {
  cancelOrder,
  inboxRows,
  json,
  newId,
  orderPlaced,
  placeOrder,
  reservedOf,
  seedBook,
  testApp,
  type Problem,
  type CommandAnswer,
  type Stock,
} from '../support/fixtures.js';

/**
 * The article's scenarios through HTTP, on every configured database, with stock figures read
 * from the database itself.
 */
reportMissingDatabases((name) => `article scenarios on ${name}`);
for (const target of testDatabases) {
  describe(`article scenarios on ${target.name}`, () => {
    let database: TestDatabaseHandle;
    let app: FastifyInstance;
    let db: Db;
    let failBeforeCommit = false;

    before(async () => {
      database = await target.open();
      db = database.db;
      app = await testApp(database, {
        testHooks: {
          beforeCommit: async () => {
            if (failBeforeCommit) throw new Error('injected crash before commit');
          },
        },
      });
    });
    after(async () => {
      await app?.close();
      await database?.close();
    });

    test('the same message twice: 201 then 200 with the first outcome, reserved 2 not 4', async () => {
      const dune = await seedBook(app, 10);
      const message = orderPlaced(dune, 2);

      const first = await placeOrder(app, message);
      const second = await placeOrder(app, message);

      assert.equal(first.statusCode, 201);
      assert.equal(first.headers['idempotent-replayed'], undefined);
      assert.equal(json<CommandAnswer>(first).status, 'processed');
      assert.equal(json<CommandAnswer>(first).outcome.result, 'reserved');
      assert.equal(second.statusCode, 200);
      assert.equal(second.headers['idempotent-replayed'], 'true');
      assert.deepEqual({ ...json<CommandAnswer>(second), status: 'processed' }, json(first), 'a replay is the first answer but for status');
      assert.equal(json<CommandAnswer>(second).status, 'duplicate');
      assert.equal(await reservedOf(db, dune), 2);
      const rows = await inboxRows(db, message.messageId);
      assert.equal(rows.length, 1);
      assert.equal(rows[0]!.consumer, 'inventory.reserve-stock');
      assert.notEqual(rows[0]!.completed_at, null);
    });

    test('a failure after the stock update, before commit, rolls back both; redelivery then processes it once', async () => {
      const dune = await seedBook(app, 10);
      const message = orderPlaced(dune, 2);

      failBeforeCommit = true;
      const crashed = await placeOrder(app, message).finally(() => {
        failBeforeCommit = false;
      });
      assert.equal(crashed.statusCode, 500);
      assert.match(String(crashed.headers['content-type']), /^application\/problem\+json/);
      assert.equal(json<Problem>(crashed).type, '/problems/internal-error');
      assert.equal(await reservedOf(db, dune), 0, 'the stock update rolled back with the claim');
      assert.equal((await inboxRows(db, message.messageId)).length, 0, 'no inbox row survives the crash');
      const reservations = await db.selectFrom('stock_reservations').selectAll().where('order_id', '=', message.data.orderId).execute();
      assert.equal(reservations.length, 0);

      const redelivered = await placeOrder(app, message);
      assert.equal(redelivered.statusCode, 201);
      assert.equal(json<CommandAnswer>(redelivered).outcome.result, 'reserved');
      assert.equal(await reservedOf(db, dune), 2);
    });

    test('one messageId delivered to two consumers: each processes it (the key is per consumer)', async () => {
      const dune = await seedBook(app, 10);
      const placed = orderPlaced(dune, 3);
      const cancelled = { messageId: placed.messageId, data: { orderId: placed.data.orderId } };

      const reserve = await placeOrder(app, placed);
      const release = await cancelOrder(app, cancelled);

      assert.equal(reserve.statusCode, 201);
      assert.equal(release.statusCode, 201);
      assert.deepEqual(json<CommandAnswer>(release).outcome, {
        result: 'released',
        orderId: placed.data.orderId,
        released: [{ bookId: dune, quantity: 3 }],
      });
      assert.equal(await reservedOf(db, dune), 0);
      const consumers = (await inboxRows(db, placed.messageId)).map((r) => r.consumer);
      assert.deepEqual(consumers, ['inventory.release-stock', 'inventory.reserve-stock']);
    });

    test('a producer duplicate (same order, new messageId) is processed as already-reserved and reserves nothing', async () => {
      const dune = await seedBook(app, 10);
      const original = orderPlaced(dune, 2);
      const resent = { ...original, messageId: `msg-${newId()}` };

      assert.equal((await placeOrder(app, original)).statusCode, 201);
      const second = await placeOrder(app, resent);

      assert.equal(second.statusCode, 201, 'a new message id is a new message: processed, not replayed');
      assert.equal(json<CommandAnswer>(second).outcome.result, 'already-reserved');
      assert.deepEqual(json<CommandAnswer>(second).outcome.existing, { quantity: 2, reservedBy: original.messageId, released: false });
      assert.equal(await reservedOf(db, dune), 2);
    });

    test('business refusals are processed outcomes, recorded and replayed', async () => {
      const dune = await seedBook(app, 1);
      const tooMany = orderPlaced(dune, 5);
      const unknown = orderPlaced(newId(), 1);

      const refused = await placeOrder(app, tooMany);
      assert.equal(refused.statusCode, 201);
      assert.deepEqual(json<CommandAnswer>(refused).outcome, { result: 'insufficient-stock', ...tooMany.data, available: 1 });
      const replay = await placeOrder(app, tooMany);
      assert.equal(replay.statusCode, 200);
      assert.deepEqual(json<CommandAnswer>(replay).outcome, json<CommandAnswer>(refused).outcome);

      const missing = await placeOrder(app, unknown);
      assert.equal(missing.statusCode, 201);
      assert.equal(json<CommandAnswer>(missing).outcome.result, 'unknown-book');
      assert.equal(await reservedOf(db, dune), 0);
      const reservations = await db.selectFrom('stock_reservations').selectAll().where('book_id', '=', dune).execute();
      assert.equal(reservations.length, 0, 'a refused reservation leaves no reservation row');
    });

    test('a cancelled order cannot be reserved again by a late copy under a new message id', async () => {
      const dune = await seedBook(app, 10);
      const placed = orderPlaced(dune, 2);
      await placeOrder(app, placed);
      await cancelOrder(app, { messageId: `cancel-${newId()}`, data: { orderId: placed.data.orderId } });

      const late = await placeOrder(app, { ...placed, messageId: `msg-${newId()}` });
      assert.equal(late.statusCode, 201);
      assert.equal(json<CommandAnswer>(late).outcome.result, 'order-cancelled', 'the order stays cancelled');
      assert.equal(await reservedOf(db, dune), 0);

      const again = await cancelOrder(app, { messageId: `cancel-${newId()}`, data: { orderId: placed.data.orderId } });
      assert.equal(
        json<CommandAnswer>(again).outcome.result,
        'not-reserved',
        'a second cancellation under a new id gives nothing back twice',
      );
      assert.equal(await reservedOf(db, dune), 0);
    });

    test('the naive handler and check-then-process, written here, reserve 4: why the inbox is needed', async () => {
      const dune = await seedBook(app, 10);
      const message = orderPlaced(dune, 2);

      // Naive: adds the quantity on every delivery.
      const naive = (m: typeof message) =>
        db
          .updateTable('stock_items')
          .set({ reserved: sql`reserved + ${m.data.quantity}` })
          .where('book_id', '=', m.data.bookId)
          .execute();
      await naive(message);
      await naive(message);
      assert.equal(await reservedOf(db, dune), 4, 'naive: delivered twice, reserved twice');

      // Check-then-process: the check, the stock update and the record are three separate steps.
      await db.updateTable('stock_items').set({ reserved: 0 }).where('book_id', '=', dune).execute();
      const checkThenProcess = async (m: typeof message, crashAfterStock: boolean) => {
        const seen = await db
          .selectFrom('inbox')
          .select('message_id')
          .where('message_id', '=', m.messageId)
          .where('consumer', '=', 'naive')
          .executeTakeFirst();
        if (seen) return;
        await db
          .updateTable('stock_items')
          .set({ reserved: sql`reserved + ${m.data.quantity}` })
          .where('book_id', '=', m.data.bookId)
          .execute();
        if (crashAfterStock) throw new Error('crash');
        await db
          .insertInto('inbox')
          .values({
            message_id: m.messageId,
            consumer: 'naive',
            key_source: 'body',
            fingerprint: 'x',
            received_at: new Date(),
            completed_at: new Date(),
            outcome: null,
            lease_until: null,
          })
          .execute();
      };
      await assert.rejects(checkThenProcess(message, true));
      await checkThenProcess(message, false);
      assert.equal(await reservedOf(db, dune), 4, 'check-then-process: crash after the stock commit, redelivered, reserved twice');

      // The inbox, same scenarios, on a fresh book.
      const safe = await seedBook(app, 10);
      const inboxMessage = orderPlaced(safe, 2);
      await placeOrder(app, inboxMessage);
      await placeOrder(app, inboxMessage);
      assert.equal(await reservedOf(db, safe), 2);
    });

    test('PUT /stock sets absolute values: repeating it changes nothing; below reserved is a 409 problem', async () => {
      const bookId = newId();
      const created = await app.inject({
        method: 'PUT',
        url: `/stock/${bookId}`,
        headers: { authorization: 'Bearer test-admin-token-0123456789' },
        payload: { title: 'Dune', onHand: 5 },
      });
      const repeated = await app.inject({
        method: 'PUT',
        url: `/stock/${bookId}`,
        headers: { authorization: 'Bearer test-admin-token-0123456789' },
        payload: { title: 'Dune', onHand: 5 },
      });
      assert.equal(created.statusCode, 201);
      assert.equal(repeated.statusCode, 200);
      assert.equal(json<Stock>(repeated).onHand, 5);
      await placeOrder(app, orderPlaced(bookId, 4));
      const below = await app.inject({
        method: 'PUT',
        url: `/stock/${bookId}`,
        headers: { authorization: 'Bearer test-admin-token-0123456789' },
        payload: { title: 'Dune', onHand: 3 },
      });
      assert.equal(below.statusCode, 409);
      assert.equal(json<Problem>(below).type, '/problems/stock-below-reserved');
      const stock = await app.inject({ url: `/stock/${bookId}` });
      assert.deepEqual(
        { ...json<Stock>(stock), updatedAt: undefined },
        { bookId, title: 'Dune', onHand: 5, reserved: 4, available: 1, updatedAt: undefined },
      );
      // Stored as answered: one row for the book (the repeated PUT created none), the refused PUT changed nothing.
      const rows = await db.selectFrom('stock_items').select(['on_hand', 'reserved']).where('book_id', '=', bookId).execute();
      assert.deepEqual(rows, [{ on_hand: 5, reserved: 4 }]);
    });
  });
}
