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
import type { Tx } from '../../src/schema/database.js';
import { DeferredWrites } from '../../src/db/dialect.js';
import { migrateToLatest } from '../../src/schema/migrate.js';
import type { WorkItem } from '../../src/inbox/kind.js';
import { orderCancelledCommand, orderPlacedCommand } from '../../src/inventory/order.commands.js';
import { reportMissingDatabases, serverDatabases, type TestDatabaseHandle } from '../support/databases.js';
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

/** The work of a transactional command kind, over data D and outcome O. */
interface Work<D, O> {
  run(trx: Tx, item: WorkItem<D>, now: Date, writes: DeferredWrites): Promise<O>;
  runBatch?(trx: Tx, items: readonly WorkItem<D>[], now: Date, writes: DeferredWrites): Promise<O[]>;
}

/** Several messages in one transaction, as group commit runs them: runBatch when the command has one, else run per item. */
async function runAsBatch<D, O>(
  handler: Work<D, O>,
  trx: Tx,
  data: readonly D[],
  now: Date,
  messageIds: readonly string[] = data.map(() => `msg-${newId()}`),
): Promise<O[]> {
  const items = data.map((d, i) => ({ data: d, key: { messageId: messageIds[i]!, source: 'body' as const } }));
  const writes = new DeferredWrites(trx);
  const outcomes: O[] = [];
  if (handler.runBatch !== undefined) outcomes.push(...(await handler.runBatch(trx, items, now, writes)));
  else for (const item of items) outcomes.push(await handler.run(trx, item, now, writes));
  await writes.flush();
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

/**
 * Transaction A runs its work and stays open before its commit; then B starts, and the test records
 * whether B was seen waiting on a lock before it finished; then A commits. `blocked` false means B
 * went through beside A's uncommitted work.
 */
async function holdOpenThenRun<T, U>(
  database: TestDatabaseHandle,
  a: (trx: Tx) => Promise<T>,
  b: (trx: Tx) => Promise<U>,
): Promise<{ a: T; b: U; blocked: boolean }> {
  let worked!: () => void;
  const aWorked = new Promise<void>((resolve) => (worked = resolve));
  let commit!: () => void;
  const aCommits = new Promise<void>((resolve) => (commit = resolve));
  const first = database.db.transaction().execute(async (trx) => {
    const result = await a(trx);
    worked();
    await aCommits;
    return result;
  });
  first.catch(() => commit());
  await Promise.race([aWorked, first]);
  const second = database.db.transaction().execute((trx) => b(trx));
  let blocked: boolean;
  try {
    blocked = await Promise.race([waitUntilBlocked(database).then(() => true), second.then(() => false)]);
  } finally {
    commit();
  }
  const [resultA, resultB] = await Promise.all([first, second]);
  return { a: resultA, b: resultB, blocked };
}

reportMissingDatabases((name) => `lock order: batches over the same books in opposite orders, on ${name}`, ['postgres', 'mysql']);

for (const target of serverDatabases.filter((d) => d.name === 'postgres' || d.name === 'mysql')) {
  describe(`lock order: batches over the same books in opposite orders, on ${target.name}`, () => {
    let database: TestDatabaseHandle;
    const now = new Date();

    before(async () => {
      // A deadlock is detected after deadlock_timeout (1 s); the lock wait bound must outlast it.
      database = await target.open({ lockTimeoutMs: 10_000 });
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

    async function reservationsOf(orderId: string) {
      return database.db
        .selectFrom('stock_reservations')
        .select(['book_id', 'quantity', 'released_by'])
        .where('order_id', '=', orderId)
        .execute();
    }

    test('a whole-order cancellation that found nothing, still open, holds back a placement of that order: it then answers order-cancelled, nothing reserved', async () => {
      const x = await book(10);
      const order = newId();
      const cancel = `cancel-${newId()}`;

      const { a, b, blocked } = await holdOpenThenRun(
        database,
        (trx) => runAsBatch(orderCancelledCommand, trx, [{ orderId: order }], now, [cancel]),
        (trx) => runAsBatch(orderPlacedCommand, trx, [{ orderId: order, bookId: x, quantity: 3 }], now),
      );

      assert.deepEqual(a, [{ result: 'not-reserved', orderId: order }]);
      assert.deepEqual(b, [{ result: 'order-cancelled', orderId: order, bookId: x, quantity: 3, cancelledBy: cancel }]);
      assert.deepEqual(await reservationsOf(order), [], 'no reservation beside the recorded cancellation');
      assert.deepEqual(await stockRow(database.db, x), { on_hand: 10, reserved: 0 });
      assert.ok(blocked, 'the placement waited for the open cancellation of its order');
    });

    test('a placement still open holds back a whole-order cancellation of that order: it then releases the reservation the placement made', async () => {
      const x = await book(10);
      const order = newId();
      const cancel = `cancel-${newId()}`;

      const { a, b, blocked } = await holdOpenThenRun(
        database,
        (trx) => runAsBatch(orderPlacedCommand, trx, [{ orderId: order, bookId: x, quantity: 3 }], now),
        (trx) => runAsBatch(orderCancelledCommand, trx, [{ orderId: order }], now, [cancel]),
      );

      assert.deepEqual(a, [{ result: 'reserved', orderId: order, bookId: x, quantity: 3 }]);
      assert.deepEqual(b, [{ result: 'released', orderId: order, released: [{ bookId: x, quantity: 3 }] }]);
      assert.deepEqual(await reservationsOf(order), [{ book_id: x, quantity: 3, released_by: cancel }]);
      assert.deepEqual(await stockRow(database.db, x), { on_hand: 10, reserved: 0 });
      assert.ok(blocked, 'the cancellation waited for the open placement of its order');
    });
  });
}
