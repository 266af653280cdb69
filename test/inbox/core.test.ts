import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { type Kysely, sql } from 'kysely';
import { Migrator } from 'kysely/migration';
import { inboxMigrations, InboxStore, type InboxTables } from '../../src/inbox/index.js';
import {
  FingerprintMismatchError,
  fingerprint,
  type InboxContext,
  processOnce,
  type TransactionalWork,
} from '../../src/inbox/machinery.js';
import { reportMissingDatabases, type TestDatabaseHandle, testDatabases } from '../support/databases.js';

/**
 * The inbox core on its own: a database holding only the inbox's tables (its own migrations) and one
 * table of the work's, no bookstore, no HTTP. Every engine the suite has runs it.
 */

interface LedgerTable {
  message_id: string;
  amount: number;
}
type Tables = InboxTables & { ledger: LedgerTable };

const CONSUMER = 'ledger.credit';

function delivery(messageId: string, data: { amount: number }) {
  return { consumer: CONSUMER, key: { messageId, source: 'body' as const }, fingerprint: fingerprint(data), payload: data };
}

/** Credits the ledger: one row per message, the amount of its data. */
function creditWork(ran: string[], fail?: Error): TransactionalWork {
  return {
    consumer: CONSUMER,
    run: async (trx, { data, key }) => {
      ran.push(key.messageId);
      const amount = Number(data.amount);
      await sql`insert into ledger (message_id, amount) values (${key.messageId}, ${amount})`.execute(trx);
      if (fail !== undefined) throw fail;
      return { credited: amount };
    },
  };
}

reportMissingDatabases((name) => `the inbox core on ${name}`);

for (const engine of testDatabases) {
  describe(`the inbox core on ${engine.name}, with only its own tables`, () => {
    let handle: TestDatabaseHandle;
    let db: Kysely<Tables>;
    let ctx: InboxContext;

    before(async () => {
      handle = await engine.open();
      db = handle.db.withTables<{ ledger: LedgerTable }>();
      const migrator = new Migrator({ db, provider: { getMigrations: async () => ({ ...inboxMigrations }) } });
      const { error } = await migrator.migrateToLatest();
      if (error !== undefined) throw new Error('the inbox migrations failed', { cause: error });
      await db.schema
        .createTable('ledger')
        .addColumn('message_id', 'varchar(200)', (c) => c.primaryKey())
        .addColumn('amount', 'integer', (c) => c.notNull())
        .execute();
      ctx = { store: new InboxStore(db), lockTimeoutMs: 5000, now: () => new Date() };
    });
    after(() => handle.close());

    const ledger = (messageId: string) => db.selectFrom('ledger').selectAll().where('message_id', '=', messageId).execute();
    const inboxRow = (messageId: string) =>
      db.selectFrom('inbox').selectAll().where('consumer', '=', CONSUMER).where('message_id', '=', messageId).executeTakeFirst();

    test('a first delivery claims its key, runs the work once and records the outcome', async () => {
      const ran: string[] = [];
      const result = await processOnce(ctx, creditWork(ran), delivery('claim-1', { amount: 5 }));
      assert.equal(result.kind, 'processed');
      assert.deepEqual(result.outcome, { credited: 5 });
      assert.deepEqual(ran, ['claim-1']);
      assert.deepEqual(await ledger('claim-1'), [{ message_id: 'claim-1', amount: 5 }]);
      const row = await inboxRow('claim-1');
      assert.notEqual(row?.completed_at, null);
    });

    test('a copy is answered with the first outcome, and the work does not run again', async () => {
      const ran: string[] = [];
      await processOnce(ctx, creditWork(ran), delivery('dup-1', { amount: 7 }));
      const again = await processOnce(ctx, creditWork(ran), delivery('dup-1', { amount: 7 }));
      assert.equal(again.kind, 'duplicate');
      assert.deepEqual(again.outcome, { credited: 7 });
      assert.deepEqual(ran, ['dup-1']);
      assert.equal((await ledger('dup-1')).length, 1);
    });

    test('two copies at once: one runs the work, the other gets its outcome', async () => {
      const ran: string[] = [];
      const both = await Promise.all([1, 2].map(() => processOnce(ctx, creditWork(ran), delivery('race-1', { amount: 3 }))));
      assert.deepEqual(both.map((r) => r.kind).sort(), ['duplicate', 'processed']);
      assert.deepEqual(
        both.map((r) => r.outcome),
        [{ credited: 3 }, { credited: 3 }],
      );
      assert.deepEqual(ran, ['race-1']);
      assert.equal((await ledger('race-1')).length, 1);
    });

    test('the key again with another payload is refused and dead-lettered; the first outcome stands', async () => {
      await processOnce(ctx, creditWork([]), delivery('reuse-1', { amount: 2 }));
      const ran: string[] = [];
      await assert.rejects(processOnce(ctx, creditWork(ran), delivery('reuse-1', { amount: 200 })), FingerprintMismatchError);
      assert.deepEqual(ran, []);
      assert.deepEqual(await ledger('reuse-1'), [{ message_id: 'reuse-1', amount: 2 }]);
      const letters = await db.selectFrom('dead_letters').selectAll().where('message_id', '=', 'reuse-1').execute();
      assert.equal(letters.length, 1);
      assert.equal(letters[0]!.consumer, CONSUMER);
      assert.deepEqual(
        (await processOnce(ctx, creditWork([]), delivery('reuse-1', { amount: 2 }))).outcome,
        { credited: 2 },
        'the first payload is still answered',
      );
    });

    test('work that fails rolls back with the claim: nothing kept, and the next delivery runs it', async () => {
      const ran: string[] = [];
      await assert.rejects(processOnce(ctx, creditWork(ran, new Error('work failed')), delivery('fail-1', { amount: 4 })), /work failed/);
      assert.equal(await inboxRow('fail-1'), undefined, 'no claim left behind');
      assert.deepEqual(await ledger('fail-1'), []);
      const retried = await processOnce(ctx, creditWork(ran), delivery('fail-1', { amount: 4 }));
      assert.equal(retried.kind, 'processed');
      assert.deepEqual(ran, ['fail-1', 'fail-1']);
      assert.deepEqual(await ledger('fail-1'), [{ message_id: 'fail-1', amount: 4 }]);
    });
  });
}
