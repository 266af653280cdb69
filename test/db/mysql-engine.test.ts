import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { databaseFailureOf, deleteOldestRows, insertIfAbsent, lockKeys } from '../../src/db/dialect.js';
import { migrateToLatest } from '../../src/schema/migrate.js';
import type { Tx } from '../../src/schema/database.js';
import { testDatabases, type TestDatabaseHandle } from '../support/databases.js';
import { skipUnlessMysql } from '../support/mysql-databases.js';
import { sessionsWaitingOnLocks, waitUntilBlocked } from '../support/observe.js';

/**
 * The MariaDB/MySQL engine under real concurrency: two transactions claiming one inbox key, the second
 * seen waiting on the first's row lock in the InnoDB monitor, then deciding by how the first ended; the
 * lock wait bound (INBOX_LOCK_TIMEOUT_MS, in whole seconds there); the orders' key locks; pruning that
 * skips held rows.
 */
const mysql = testDatabases.find((d) => d.name === 'mysql');

/** A transaction kept open until `finish` is called with how it must end. */
function openTransaction(database: TestDatabaseHandle, work: (trx: Tx) => Promise<void>) {
  let finish!: (how: 'commit' | 'rollback') => void;
  const decided = new Promise<'commit' | 'rollback'>((resolve) => (finish = resolve));
  let ready!: () => void;
  const started = new Promise<void>((resolve) => (ready = resolve));
  const done = database.db
    .transaction()
    .execute(async (trx) => {
      await work(trx);
      ready();
      if ((await decided) === 'rollback') throw new Rollback();
    })
    .catch((error: unknown) => {
      if (!(error instanceof Rollback)) throw error;
    });
  return { started, finish, done };
}

class Rollback extends Error {}

/** Lock waits on a table of this database, as information_schema.innodb_lock_waits and innodb_locks list them. */
async function lockWaitsOn(database: TestDatabaseHandle, table: string): Promise<number> {
  const { rows } = await sql<{ n: number | string }>`select count(*) as n from information_schema.innodb_lock_waits w
      join information_schema.innodb_locks l on l.lock_id = w.requested_lock_id
      where l.lock_table = concat('\`', database(), '\`.\`', ${table}, '\`')`.execute(database.db);
  return Number(rows[0]?.n ?? 0);
}

const row = (messageId: string) => ({
  message_id: messageId,
  consumer: 'inventory.reserve-stock',
  key_source: 'body',
  fingerprint: 'f'.repeat(64),
  received_at: new Date(),
});

describe('the MariaDB/MySQL engine under concurrency', { skip: skipUnlessMysql() }, () => {
  let database: TestDatabaseHandle;
  let short: TestDatabaseHandle;

  before(async () => {
    database = await mysql!.open();
    await migrateToLatest(database.db);
    // A 300 ms bound: InnoDB counts whole seconds, so this one waits one second.
    short = await mysql!.open({ lockTimeoutMs: 300 });
    await migrateToLatest(short.db);
  });
  after(async () => {
    await database?.close();
    await short?.close();
  });

  for (const how of ['commit', 'rollback'] as const) {
    test(`the second claim of a key waits on the first; after the first's ${how} it ${how === 'commit' ? 'finds a duplicate' : 'wins'}`, async () => {
      const messageId = `msg-${how}-${Date.now()}`;
      const first = openTransaction(database, async (trx) =>
        assert.equal(await insertIfAbsent(trx, 'inbox', row(messageId), ['message_id', 'consumer']), true),
      );
      await first.started;
      assert.equal(await sessionsWaitingOnLocks(database), 0, 'nothing waits before the second claim');
      const second = database.db.transaction().execute((trx) => insertIfAbsent(trx, 'inbox', row(messageId), ['message_id', 'consumer']));
      await waitUntilBlocked(database);
      assert.ok((await lockWaitsOn(database, 'inbox')) >= 1, 'information_schema.innodb_lock_waits names the wait on the inbox row');
      first.finish(how);
      await first.done;
      assert.equal(
        await second,
        how === 'rollback',
        how === 'commit' ? 'a duplicate after the commit' : 'the key is free after the rollback',
      );
      const rows = await database.db.selectFrom('inbox').select('message_id').where('message_id', '=', messageId).execute();
      assert.equal(rows.length, 1);
    });
  }

  test('a claim that waits past the lock bound (rounded up to one second) fails as a lock timeout', async () => {
    const messageId = `msg-timeout-${Date.now()}`;
    const first = openTransaction(short, async (trx) =>
      assert.equal(await insertIfAbsent(trx, 'inbox', row(messageId), ['message_id', 'consumer']), true),
    );
    await first.started;
    const started = performance.now();
    const error = await short.db
      .transaction()
      .execute((trx) => insertIfAbsent(trx, 'inbox', row(messageId), ['message_id', 'consumer']))
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    const waited = performance.now() - started;
    first.finish('commit');
    await first.done;
    assert.deepEqual(databaseFailureOf(error), { kind: 'lock-timeout' });
    assert.ok(waited >= 900, `waited ${Math.round(waited)} ms: the bound is one whole second`);
  });

  test("an order's key lock makes a second transaction on the same order wait, and not one on another order", async () => {
    const first = openTransaction(database, (trx) => lockKeys(trx, 'order', ['a-1', 'b-2']));
    await first.started;
    await database.db.transaction().execute((trx) => lockKeys(trx, 'order', ['c-3']));
    const second = database.db.transaction().execute((trx) => lockKeys(trx, 'order', ['b-2']));
    await waitUntilBlocked(database);
    first.finish('commit');
    await first.done;
    await second;
    assert.equal(await sessionsWaitingOnLocks(database), 0);
  });

  test('pruning deletes the oldest rows before the cutoff and skips a row another transaction holds', async () => {
    const old = new Date(Date.now() - 86_400_000);
    const ids = ['prune-1', 'prune-2', 'prune-3'];
    for (const [i, id] of ids.entries()) {
      await database.db
        .insertInto('inbox')
        .values({ ...row(id), received_at: old, completed_at: new Date(old.getTime() + i) })
        .execute();
    }
    const holder = openTransaction(database, async (trx) => {
      await trx.selectFrom('inbox').selectAll().where('message_id', '=', 'prune-1').forUpdate().execute();
    });
    await holder.started;
    const deleted = await deleteOldestRows(database.db, { table: 'inbox', column: 'completed_at' }, new Date(), 10);
    holder.finish('commit');
    await holder.done;
    assert.equal(deleted, 2);
    const left = await database.db.selectFrom('inbox').select('message_id').where('message_id', 'in', ids).execute();
    assert.deepEqual(
      left.map((r) => r.message_id),
      ['prune-1'],
    );
  });
});
