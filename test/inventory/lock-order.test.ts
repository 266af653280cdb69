import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  type KyselyPlugin,
  type PluginTransformQueryArgs,
  type PluginTransformResultArgs,
  type QueryResult,
  type RootOperationNode,
  type UnknownRow,
} from 'kysely';
import type { Tx } from '../../src/db/database.js';
import { migrateToLatest } from '../../src/db/migrate.js';
import type { InboxHandler } from '../../src/inbox/group-commit.js';
import { orderCancelledCommand, orderPlacedCommand } from '../../src/inventory/order.commands.js';
import { postgresDatabase, skipUnlessPostgres, type TestDatabaseHandle } from '../support/databases.js';
import { newId, stockRow } from '../support/fixtures.js';
import { waitUntilBlocked } from '../support/observe.js';

/**
 * Runs `pause` once, right after the first statement that names stock_items has returned: the moment a
 * transaction holds its first stock row lock (or, before the lock order was fixed, its first reservation
 * and stock row) and has not yet taken the others.
 */
class PauseAfterFirstStockStatement implements KyselyPlugin {
  private readonly stock = new WeakSet<object>();
  private fired = false;
  constructor(private readonly pause: () => Promise<void>) {}

  transformQuery(args: PluginTransformQueryArgs): RootOperationNode {
    if (JSON.stringify(args.node).includes('"stock_items"')) this.stock.add(args.queryId);
    return args.node;
  }

  async transformResult(args: PluginTransformResultArgs): Promise<QueryResult<UnknownRow>> {
    if (!this.fired && this.stock.has(args.queryId)) {
      this.fired = true;
      await this.pause();
    }
    return args.result;
  }
}

/** Several messages in one transaction, as group commit runs them: runBatch when the command has one, else run per item. */
async function runAsBatch<D, O>(handler: InboxHandler<D, O>, trx: Tx, data: readonly D[], now: Date): Promise<O[]> {
  const items = data.map((d) => ({ data: d, key: { messageId: `msg-${newId()}`, source: 'body' as const } }));
  if (handler.runBatch !== undefined) return handler.runBatch(trx, items, now);
  const outcomes: O[] = [];
  for (const item of items) outcomes.push(await handler.run(trx, item, now));
  return outcomes;
}

/**
 * Transaction A runs its batch and stops right after its first stock statement; then B starts and is
 * seen waiting on a lock A holds; then A goes on. Where A and B take their locks in different orders,
 * A now waits on B and PostgreSQL kills one of them (40P01); in one order everywhere B merely waits.
 */
async function interleave<T, U>(database: TestDatabaseHandle, a: (trx: Tx) => Promise<T>, b: (trx: Tx) => Promise<U>): Promise<[T, U]> {
  let paused!: () => void;
  const aPaused = new Promise<void>((resolve) => (paused = resolve));
  let resume!: () => void;
  const aResumes = new Promise<void>((resolve) => (resume = resolve));
  const pause = new PauseAfterFirstStockStatement(async () => {
    paused();
    await aResumes;
  });
  const first = database.db.transaction().execute((trx) => a(trx.withPlugin(pause)));
  first.catch(() => resume());
  await Promise.race([aPaused, first]);
  const second = database.db.transaction().execute((trx) => b(trx));
  try {
    await Promise.race([waitUntilBlocked(database), second]);
  } finally {
    resume();
  }
  return Promise.all([first, second]);
}

describe('lock order: batches over the same books in opposite orders, on postgres', { skip: skipUnlessPostgres }, () => {
  let database: TestDatabaseHandle;
  const now = new Date();

  before(async () => {
    // A deadlock is detected after deadlock_timeout (1 s); the lock wait bound must outlast it.
    database = await postgresDatabase!.open({ lockTimeoutMs: 10_000 });
    await migrateToLatest(database.db);
  });
  after(async () => {
    await database?.close();
  });

  async function book(onHand: number): Promise<string> {
    const bookId = newId();
    await database.db
      .insertInto('stock_items')
      .values({ book_id: bookId, title: 'Dune', on_hand: onHand, reserved: 0, updated_at: now })
      .execute();
    return bookId;
  }

  async function reserve(orderId: string, bookId: string, quantity: number): Promise<void> {
    await database.db.transaction().execute((trx) => runAsBatch(orderPlacedCommand, trx, [{ orderId, bookId, quantity }], now));
  }

  test('two cancellation batches, books [X, Y] and [Y, X]: both commit, every reservation released once', async () => {
    const [x, y] = [await book(10), await book(10)];
    const orders = [newId(), newId(), newId(), newId()];
    await reserve(orders[0]!, x, 1);
    await reserve(orders[1]!, y, 2);
    await reserve(orders[2]!, y, 3);
    await reserve(orders[3]!, x, 4);

    const [a, b] = await interleave(
      database,
      (trx) => runAsBatch(orderCancelledCommand, trx, [{ orderId: orders[0]! }, { orderId: orders[1]! }], now),
      (trx) =>
        runAsBatch(
          orderCancelledCommand,
          trx,
          [
            { orderId: orders[2]!, bookId: y },
            { orderId: orders[3]!, bookId: x },
          ],
          now,
        ),
    );

    assert.deepEqual(
      [...a, ...b].map((o) => (o.result === 'released' ? o.released : o.result)),
      [[{ bookId: x, quantity: 1 }], [{ bookId: y, quantity: 2 }], [{ bookId: y, quantity: 3 }], [{ bookId: x, quantity: 4 }]],
    );
    assert.deepEqual(await stockRow(database.db, x), { on_hand: 10, reserved: 0 });
    assert.deepEqual(await stockRow(database.db, y), { on_hand: 10, reserved: 0 });
  });

  test('a single reservation beside a batch that holds its book: it waits, then sees the batch reservation of the same order line', async () => {
    const [x, y] = [await book(10), await book(10)];
    const [order, other] = [newId(), newId()];

    // The batch (a producer duplicate of the order line under another message id, and another order) locks X and Y first.
    const [batch, single] = await interleave(
      database,
      (trx) =>
        runAsBatch(
          orderPlacedCommand,
          trx,
          [
            { orderId: order, bookId: x, quantity: 2 },
            { orderId: other, bookId: y, quantity: 1 },
          ],
          now,
        ),
      (trx) => runAsBatch(orderPlacedCommand, trx, [{ orderId: order, bookId: x, quantity: 2 }], now),
    );

    assert.deepEqual(
      batch.map((o) => o.result),
      ['reserved', 'reserved'],
    );
    assert.equal(single[0]!.result, 'already-reserved');
    assert.deepEqual(await stockRow(database.db, x), { on_hand: 10, reserved: 2 });
    assert.deepEqual(await stockRow(database.db, y), { on_hand: 10, reserved: 1 });
  });
});
