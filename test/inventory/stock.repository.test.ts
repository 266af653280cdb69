import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  RawNode,
  UpdateQueryNode,
  type KyselyPlugin,
  type PluginTransformQueryArgs,
  type PluginTransformResultArgs,
  type QueryResult,
  type RootOperationNode,
  type UnknownRow,
} from 'kysely';
import { migrateToLatest } from '../../src/db/migrate.js';
import { reserveStock } from '../../src/inventory/stock.repository.js';
import { postgresDatabase, skipUnlessPostgres, type TestDatabaseHandle } from '../support/databases.js';
import { newId, stockRow } from '../support/fixtures.js';

/**
 * Runs `effect` once, right after the first statement that refused the stock has returned: an UPDATE
 * that matched no row, or the reservation insert and stock update sent as one statement (PostgreSQL)
 * reporting no row updated. The moment between a refused reservation and whatever the repository reads next.
 */
class AfterFirstEmptyUpdate implements KyselyPlugin {
  private readonly updates = new WeakSet<object>();
  private fired = false;
  constructor(private readonly effect: () => Promise<void>) {}

  transformQuery(args: PluginTransformQueryArgs): RootOperationNode {
    if (UpdateQueryNode.is(args.node) || RawNode.is(args.node)) this.updates.add(args.queryId);
    return args.node;
  }

  async transformResult(args: PluginTransformResultArgs): Promise<QueryResult<UnknownRow>> {
    const refused = args.result.numAffectedRows === 0n || (args.result.rows[0] as { updated?: unknown } | undefined)?.updated === 0;
    if (!this.fired && this.updates.has(args.queryId) && refused) {
      this.fired = true;
      await this.effect();
    }
    return args.result;
  }
}

/**
 * Found by the torture run (scripts/torture/): a refused reservation read the stock figure in a
 * later statement than the one that refused it, so stock freed in between was recorded as
 * "insufficient-stock: 3 wanted, 4 available". Needs two connections, so PostgreSQL only.
 */
describe('reserveStock against stock freed by another transaction, on postgres', { skip: skipUnlessPostgres }, () => {
  let database: TestDatabaseHandle;

  before(async () => {
    database = await postgresDatabase!.open();
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

  test('stock freed right after the refusing statement is reserved, never recorded as enough-but-refused', async () => {
    const bookId = await book(5, 4);
    // Another transaction (another connection, committed at once) releases 4 copies in that moment.
    const release = new AfterFirstEmptyUpdate(async () => {
      await database.db.updateTable('stock_items').set({ reserved: 0 }).where('book_id', '=', bookId).execute();
    });
    const outcome = await database.db
      .transaction()
      .execute((trx) => reserveStock(trx.withPlugin(release), { orderId: newId(), bookId, quantity: 3, messageId: 'm-freed' }, new Date()));

    assert.equal(outcome.result, 'reserved');
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
