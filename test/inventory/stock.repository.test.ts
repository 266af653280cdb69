import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { migrateToLatest } from '../../src/schema/migrate.js';
import { reserveStock } from '../../src/inventory/stock.repository.js';
import { reportMissingDatabases, serverDatabases, type TestDatabaseHandle } from '../support/databases.js';
import { newId, stockRow } from '../support/fixtures.js';
import { waitUntilBlocked } from '../support/observe.js';

/**
 * Found by the torture run (scripts/torture/): a refused reservation read the stock figure in a
 * later statement than the one that refused it, so stock freed in between was recorded as
 * "insufficient-stock: 3 wanted, 4 available". A reservation now decides on the figure of the stock
 * row it has locked. Needs two connections, so a database server: PostgreSQL and MariaDB.
 */
reportMissingDatabases((name) => `reserveStock against stock freed by another transaction, on ${name}`, ['postgres', 'mysql']);

for (const target of serverDatabases.filter((d) => d.name === 'postgres' || d.name === 'mysql')) {
  describe(`reserveStock against stock freed by another transaction, on ${target.name}`, () => {
    let database: TestDatabaseHandle;

    before(async () => {
      database = await target.open();
      await migrateToLatest(database.db);
    });
    after(async () => {
      await database?.close();
    });

    async function book(onHand: number, reserved: number): Promise<string> {
      const bookId = newId();
      await database.db
        .insertInto('stock_items')
        .values({ book_id: bookId, title: 'Dune', on_hand: onHand, reserved, updated_at: new Date() })
        .execute();
      return bookId;
    }

    test('stock being freed by a transaction that holds the row: the reservation waits for it and is reserved on the freed figure', async () => {
      const bookId = await book(5, 4);
      // Another transaction releases 4 copies and has not committed when the reservation arrives.
      let commit!: () => void;
      const committing = new Promise<void>((resolve) => (commit = resolve));
      let holding!: () => void;
      const held = new Promise<void>((resolve) => (holding = resolve));
      const release = database.db.transaction().execute(async (trx) => {
        await trx.updateTable('stock_items').set({ reserved: 0 }).where('book_id', '=', bookId).execute();
        holding();
        await committing;
      });
      await held;
      const reservation = database.db
        .transaction()
        .execute((trx) => reserveStock(trx, { orderId: newId(), bookId, quantity: 3, messageId: 'm-freed' }, new Date()));
      try {
        await waitUntilBlocked(database);
      } finally {
        commit();
      }
      await release;

      assert.equal((await reservation).result, 'reserved');
      assert.deepEqual(await stockRow(database.db, bookId), { on_hand: 5, reserved: 3 });
    });

    test('a refusal records the figure it was decided on', async () => {
      const bookId = await book(5, 4);
      const outcome = await database.db
        .transaction()
        .execute((trx) => reserveStock(trx, { orderId: newId(), bookId, quantity: 3, messageId: 'm-short' }, new Date()));

      assert.deepEqual(
        { result: outcome.result, available: 'available' in outcome ? outcome.available : undefined },
        { result: 'insufficient-stock', available: 1 },
      );
      assert.deepEqual(await stockRow(database.db, bookId), { on_hand: 5, reserved: 4 });
      const rows = await database.db.selectFrom('stock_reservations').selectAll().where('book_id', '=', bookId).execute();
      assert.equal(rows.length, 0, 'the refused reservation row is taken back');
    });
  });
}
