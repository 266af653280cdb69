import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { sql } from 'kysely';
import { Type } from 'typebox';
import type { Database } from '../../src/schema/database.js';
import { migrateToLatest } from '../../src/schema/migrate.js';
import {
  DuplicateCache,
  fingerprint,
  GroupCommitter,
  InboxStore,
  type Delivery,
  type TransactionalKind,
} from '../../src/inbox/machinery.js';
import { testDatabases } from '../support/databases.js';
import { newId } from '../support/fixtures.js';

/**
 * A kind without runBatch whose work defers an update of one shared row: a batch of such messages runs
 * `run` once per message on one transaction. On PostgreSQL the deferred writes go out as one statement
 * of data-modifying CTEs, where two updates of one row would not both take effect; each message's writes
 * must reach the database before the next message's: otherwise the parts' row counts fail the batch,
 * and it falls back to a transaction per message (or, for writes without a row count, loses increments).
 */
const Increment = Type.Object({ bookId: Type.String() });
const Counted = Type.Object({ counted: Type.Boolean() });

function incrementKind(): TransactionalKind<typeof Increment, typeof Counted, Database> {
  return {
    kind: 'transaction',
    consumer: 'test.increment',
    name: 'Increment',
    data: Increment,
    outcome: Counted,
    normalize: (d) => d,
    run: async (trx, { data }, now, writes) => {
      await writes.add(
        trx
          .updateTable('stock_items')
          .set({ on_hand: sql<number>`on_hand + 1`, updated_at: now })
          .where('book_id', '=', data.bookId),
        { rows: 1, what: 'the increment' },
      );
      return { counted: true };
    },
  };
}

for (const target of testDatabases) {
  describe(`deferred writes in a batch run message by message, on ${target.name}`, () => {
    test('twenty increments of one row in one batch: every one counted, in fewer transactions than messages', async (t) => {
      const database = await target.open();
      t.after(() => database.close());
      await migrateToLatest(database.db);
      const bookId = newId();
      await database.db
        .insertInto('stock_items')
        .values({ book_id: bookId, title: 'Dune', on_hand: 0, reserved: 0, updated_at: new Date() })
        .execute();
      const batches: number[] = [];
      const committer = new GroupCommitter(
        { store: new InboxStore(database.db), lockTimeoutMs: 5000, now: () => new Date() },
        {
          maxBatch: 64,
          concurrency: 1,
          queueLimit: 100,
          overloadRetryAfterSeconds: 1,
          cache: new DuplicateCache({ maxEntries: 0, ttlMs: 0, now: () => new Date() }),
          onBatch: (_consumer, size) => batches.push(size),
        },
      );
      const kind = incrementKind();
      const deliveries: Delivery[] = Array.from({ length: 20 }, (_, i) => ({
        consumer: kind.consumer,
        key: { messageId: `increment-${i}`, source: 'body' },
        fingerprint: fingerprint({ bookId }),
        payload: { bookId },
      }));
      const results = await Promise.all(deliveries.map((delivery) => committer.submit(kind, delivery)));
      assert.deepEqual(
        results.map((r) => r.kind),
        deliveries.map(() => 'processed'),
      );
      const row = await database.db.selectFrom('stock_items').select('on_hand').where('book_id', '=', bookId).executeTakeFirstOrThrow();
      assert.equal(row.on_hand, 20, 'each processed increment is in the row');
      assert.ok(
        batches.some((size) => size > 1),
        `the increments shared transactions: batches ${JSON.stringify(batches)}`,
      );
      const completed = await database.db
        .selectFrom('inbox')
        .select(sql<number>`count(*)`.as('n'))
        .where('consumer', '=', kind.consumer)
        .executeTakeFirstOrThrow();
      assert.equal(Number(completed.n), 20);
    });
  });
}
