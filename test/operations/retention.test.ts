import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import { KEY_EXPIRES_HEADER } from '../../src/app.js';
import { ConfigError, loadConfig } from '../../src/config.js';
import type { Db } from '../../src/schema/database.js';
import { claimKey } from '../../src/inbox/inbox.repository.js';
import { pruneCompletedInbox, retentionCutoff } from '../../src/inbox/retention.js';
import { reportMissingDatabases, type TestDatabaseHandle, testDatabases } from '../support/databases.js';
import {
  admin,
  inboxRows,
  json,
  newId,
  orderPlaced,
  placeOrder,
  reservedOf,
  seedBook,
  testApp,
  type CommandAnswer,
  type Pruned,
} from '../support/fixtures.js';
import { sample, scrape } from './prometheus.js';

const DAY = 86_400_000;
const T0 = Date.parse('2026-06-15T12:00:00.000Z');
const EMAIL = 'notifications.stock-reserved-email';

/** Completed inbox rows written straight to the table, completed at `completedAt`. */
async function insertCompleted(db: Db, count: number, completedAt: Date, consumer = 'test.retention'): Promise<string[]> {
  const ids = Array.from({ length: count }, () => `old-${newId()}`);
  await db
    .insertInto('inbox')
    .values(
      ids.map((id) => ({
        message_id: id,
        consumer,
        key_source: 'body',
        fingerprint: 'f'.repeat(64),
        received_at: completedAt,
        completed_at: completedAt,
        outcome: JSON.stringify({ result: 'test' }),
        lease_until: null,
      })),
    )
    .execute();
  return ids;
}

async function countInbox(db: Db, consumer: string): Promise<number> {
  const rows = await db.selectFrom('inbox').select('message_id').where('consumer', '=', consumer).execute();
  return rows.length;
}

/**
 * Retention with an injected clock: which rows go, which stay, in bounded batches, and what a very
 * late copy of a pruned key meets.
 */
reportMissingDatabases((name) => `retention on ${name}`);
for (const target of testDatabases) {
  describe(`retention on ${target.name}`, { timeout: 120_000 }, () => {
    let database: TestDatabaseHandle;
    let app: FastifyInstance;
    let db: Db;
    let clock = T0;

    before(async () => {
      database = await target.open();
      db = database.db;
      // The background job is off here: each prune is the one the test asks for.
      app = await testApp(database, { now: () => new Date(clock), config: { inboxPruneIntervalMs: 0 } });
    });
    after(async () => {
      await app?.close();
      await database?.close();
    });

    test('old completed rows and old dead letters go; recent and in-progress rows stay; a very late copy is processed again', async () => {
      clock = T0 - 100 * DAY;
      const dune = await seedBook(app, 10);
      const ancient = orderPlaced(dune, 1);
      assert.equal((await placeOrder(app, ancient)).statusCode, 201);
      const ancientMismatch = await placeOrder(app, { ...ancient, data: { ...ancient.data, quantity: 9 } });
      assert.equal(ancientMismatch.statusCode, 422, 'a dead letter received 100 days ago');

      clock = T0 - 20 * DAY;
      const old = orderPlaced(dune, 2);
      assert.equal((await placeOrder(app, old)).statusCode, 201);
      const oldMismatch = await placeOrder(app, { ...old, data: { ...old.data, quantity: 9 } });
      assert.equal(oldMismatch.statusCode, 422, 'a dead letter received 20 days ago');
      const stuckId = `stuck-${newId()}`;
      await claimKey(db, {
        messageId: stuckId,
        consumer: EMAIL,
        keySource: 'body',
        fingerprint: 'e'.repeat(64),
        receivedAt: new Date(clock),
        leaseUntil: new Date(clock + 30_000),
      });

      clock = T0 - 1 * DAY;
      const recent = orderPlaced(dune, 3);
      assert.equal((await placeOrder(app, recent)).statusCode, 201);
      assert.equal(await reservedOf(db, dune), 6);

      clock = T0;
      const pruned = await app.inject({ method: 'POST', url: '/inbox/prune', headers: admin });
      assert.equal(pruned.statusCode, 200);
      assert.deepEqual(json(pruned), {
        inbox: 2,
        deadLetters: 1,
        outbox: 0,
        inboxCutoff: new Date(T0 - 14 * DAY).toISOString(),
        deadLetterCutoff: new Date(T0 - 90 * DAY).toISOString(),
        outboxCutoff: new Date(T0 - 7 * DAY).toISOString(),
        complete: true,
      });

      assert.equal((await inboxRows(db, ancient.messageId)).length, 0, 'completed 100 days ago: pruned');
      assert.equal((await inboxRows(db, old.messageId)).length, 0, 'completed 20 days ago: pruned');
      assert.equal((await inboxRows(db, recent.messageId)).length, 1, 'completed a day ago: kept');
      const stuck = await inboxRows(db, stuckId);
      assert.equal(stuck.length, 1, 'in progress for 20 days: never pruned');
      assert.equal(stuck[0]!.completed_at, null);
      const letters = await db.selectFrom('dead_letters').select('message_id').execute();
      assert.deepEqual(
        letters.map((l) => l.message_id),
        [old.messageId],
        'the 100-day-old dead letter went, the 20-day-old one stayed',
      );

      const again = await app.inject({ method: 'POST', url: '/inbox/prune', headers: admin });
      assert.deepEqual([json<Pruned>(again).inbox, json<Pruned>(again).deadLetters], [0, 0], 'a second run finds nothing more');

      // The documented consequence: the key is forgotten, so a very late copy is a new message to the
      // inbox. It is processed (201), not replayed; for reserve-stock the reservation's own uniqueness
      // (order, book) still keeps it from reserving twice.
      const late = await placeOrder(app, old);
      assert.equal(late.statusCode, 201);
      assert.equal(json<CommandAnswer>(late).status, 'processed');
      assert.equal(json<CommandAnswer>(late).outcome.result, 'already-reserved');
      assert.equal(json<CommandAnswer>(late).outcome.existing?.reservedBy, old.messageId);
      assert.equal(await reservedOf(db, dune), 6, 'nothing reserved twice');
      assert.equal((await inboxRows(db, old.messageId)).length, 1, 'the key is recorded again');
    });

    test('command responses say how long their key is remembered: processing time + INBOX_RETENTION_DAYS', async () => {
      clock = T0;
      const dune = await seedBook(app, 10);
      const message = orderPlaced(dune, 1);
      const first = await placeOrder(app, message);
      clock = T0 + 5 * DAY;
      const replay = await placeOrder(app, message);

      const expected = new Date(T0 + 14 * DAY).toUTCString();
      assert.equal(first.statusCode, 201);
      assert.equal(first.headers[KEY_EXPIRES_HEADER], expected);
      assert.equal(replay.statusCode, 200);
      assert.equal(replay.headers[KEY_EXPIRES_HEADER], expected, 'a replay advertises the first processing time, not its own');
      const refused = await placeOrder(app, { messageId: 'x' });
      assert.equal(refused.statusCode, 400);
      assert.equal(refused.headers[KEY_EXPIRES_HEADER], undefined, 'nothing recorded, nothing remembered');
    });

    test('batches are bounded: each DELETE removes at most the batch size; a run stops at its batch bound', async () => {
      const consumer = `test.batches.${newId()}`;
      const cutoff = retentionCutoff(new Date(T0), 14);
      await insertCompleted(db, 5, new Date(T0 - 30 * DAY), consumer);
      await insertCompleted(db, 2, new Date(T0 - 1 * DAY), consumer);

      const bounded = await pruneCompletedInbox(db, cutoff, { batchSize: 2, maxBatches: 1 });
      assert.deepEqual(bounded, { deleted: 2, batches: [2], complete: false });
      assert.equal(await countInbox(db, consumer), 5);

      const rest = await pruneCompletedInbox(db, cutoff, { batchSize: 2 });
      assert.deepEqual(rest, { deleted: 3, batches: [2, 1], complete: true });
      assert.equal(await countInbox(db, consumer), 2, 'the two recent rows stay');
    });

    test('a run asked to stop (the app is closing) deletes nothing more and says it is incomplete', async () => {
      const consumer = `test.abort.${newId()}`;
      await insertCompleted(db, 3, new Date(T0 - 30 * DAY), consumer);
      const stopped = new AbortController();
      stopped.abort();
      const result = await pruneCompletedInbox(db, retentionCutoff(new Date(T0), 14), { batchSize: 2, signal: stopped.signal });
      assert.deepEqual(result, { deleted: 0, batches: [], complete: false });
      assert.equal(await countInbox(db, consumer), 3);
      await pruneCompletedInbox(db, retentionCutoff(new Date(T0), 14), { batchSize: 10 });
    });

    test('several pruners at once share the work: every row deleted once, counted once', async () => {
      const consumer = `test.concurrent.${newId()}`;
      await insertCompleted(db, 40, new Date(T0 - 30 * DAY), consumer);
      const cutoff = retentionCutoff(new Date(T0), 14);

      const results = await Promise.all([1, 2, 3].map(() => pruneCompletedInbox(db, cutoff, { batchSize: 3 })));

      assert.equal(
        results.reduce((n, r) => n + r.deleted, 0),
        40,
        'the counts add up to the rows there were',
      );
      for (const r of results)
        assert.ok(
          r.batches.every((b) => b <= 3),
          `batches ${r.batches.join(',')} exceed 3`,
        );
      assert.equal(await countInbox(db, consumer), 0);
    });

    if (target.name === 'postgres') {
      test('several pruners at once while claims arrive, some for the very keys being pruned: no claim waits past its bound, every row deleted once', async () => {
        clock = T0 - 30 * DAY;
        const dune = await seedBook(app, 1000);
        const old = Array.from({ length: 40 }, () => orderPlaced(dune, 1));
        for (const message of old) assert.equal((await placeOrder(app, message)).statusCode, 201);
        const consumer = `test.racing.${newId()}`;
        await insertCompleted(db, 1500, new Date(T0 - 30 * DAY), consumer);
        clock = T0;
        const cutoff = retentionCutoff(new Date(T0), 14);

        // Pruners on their own connections, claims through the service's pool: really at the same time.
        const pruners = Promise.all([1, 2, 3].map(() => pruneCompletedInbox(db, cutoff, { batchSize: 25 })));
        const fresh = Array.from({ length: 40 }, () => orderPlaced(dune, 1));
        const answers = await Promise.all([...old, ...fresh].map((message) => placeOrder(app, message)));
        const results = await pruners;

        const statuses = answers.map((a) => a.statusCode);
        // A claim that waited on a pruner's lock past the bound would answer 409 in-flight (or fail).
        assert.deepEqual(
          statuses.filter((s) => s !== 200 && s !== 201),
          [],
          'every claim answered within its bound',
        );
        for (const [i, a] of answers.slice(0, old.length).entries()) {
          const body = json<CommandAnswer>(a);
          // Its key was still there (200, replayed) or already pruned (201, processed again: already-reserved).
          assert.ok(
            a.statusCode === 200 ? body.outcome.result === 'reserved' : body.outcome.result === 'already-reserved',
            `late copy ${i}: ${a.statusCode} ${a.body}`,
          );
        }
        assert.ok(
          answers.slice(old.length).every((a) => a.statusCode === 201),
          'new messages are processed',
        );
        assert.equal(
          results.filter((r) => r.deleted > 0).length >= 2,
          true,
          `the pruners shared the work: ${results.map((r) => r.deleted).join(', ')}`,
        );
        for (const r of results) assert.ok(r.batches.every((b) => b <= 25));
        const prunedNow = results.reduce((n, r) => n + r.deleted, 0);
        assert.equal(await countInbox(db, consumer), 0);
        // Every old row went exactly once: the 1500 filler rows and the 40 old claims (a late copy
        // processed again is recorded anew, at T0, and stays).
        assert.equal(prunedNow, 1500 + old.length, `pruned ${prunedNow}`);
        assert.equal(await reservedOf(db, dune), old.length + fresh.length, 'nothing reserved twice');
      });

      test('a pruner does not wait for a row another transaction holds: it skips it, and a later run takes it', async () => {
        const consumer = `test.locked.${newId()}`;
        const [held, ...others] = await insertCompleted(db, 4, new Date(T0 - 30 * DAY), consumer);
        const cutoff = retentionCutoff(new Date(T0), 14);

        let release!: () => void;
        const released = new Promise<void>((resolve) => (release = resolve));
        let locked!: () => void;
        const isLocked = new Promise<void>((resolve) => (locked = resolve));
        const holder = db.transaction().execute(async (trx) => {
          await trx
            .selectFrom('inbox')
            .select('message_id')
            .where('message_id', '=', held!)
            .where('consumer', '=', consumer)
            .forUpdate()
            .execute();
          locked();
          await released;
        });
        await isLocked;
        const whileHeld = await pruneCompletedInbox(db, cutoff, { batchSize: 10 });
        release();
        await holder;

        assert.equal(whileHeld.deleted, others.length, 'the held row was skipped, not waited for');
        const after = await pruneCompletedInbox(db, cutoff, { batchSize: 10 });
        assert.equal(after.deleted, 1);
        assert.equal(await countInbox(db, consumer), 0);
      });
    }

    test(
      "the orders' lock rows (MariaDB, MySQL) go once unused past the inbox's retention; a recently locked one stays",
      { skip: target.name === 'mysql' ? false : 'only MariaDB and MySQL keep the orders locks as rows' },
      async () => {
        clock = T0;
        const dune = await seedBook(app, 10);
        assert.equal((await placeOrder(app, orderPlaced(dune, 1))).statusCode, 201);
        const stale = await db.selectFrom('key_locks').select('resource').execute();
        assert.ok(stale.length >= 1, 'placing an order locked it through a row');
        await db
          .updateTable('key_locks')
          .set({ locked_at: new Date(T0 - 100 * DAY) })
          .execute();
        // Locked now (after the clock's cutoff): it stays.
        const recent = orderPlaced(dune, 1);
        assert.equal((await placeOrder(app, recent)).statusCode, 201);

        const pruned = await app.inject({ method: 'POST', url: '/inbox/prune', headers: admin });
        assert.equal(pruned.statusCode, 200);
        const left = (await db.selectFrom('key_locks').select('resource').execute()).map((r) => r.resource);
        for (const { resource } of stale) assert.ok(!left.includes(resource), `${resource} was unused for 100 days and stays`);
        assert.ok(
          left.some((resource) => resource.includes(recent.data.orderId)),
          'the order locked just now lost its row',
        );
      },
    );

    test('POST /inbox/prune is an admin route', async () => {
      const res = await app.inject({ method: 'POST', url: '/inbox/prune' });
      assert.equal(res.statusCode, 401);
      assert.match(String(res.headers['content-type']), /^application\/problem\+json/);
    });
  });
}

describe('the background retention job', () => {
  const target = testDatabases[0]!;
  let database: TestDatabaseHandle;
  let app: FastifyInstance;

  before(async () => {
    database = await target.open();
    app = await testApp(database, { config: { inboxPruneIntervalMs: 20, inboxRetentionDays: 14 } });
  });
  after(async () => {
    await app?.close();
    await database?.close();
  });

  test('prunes on its interval and counts what it pruned in the metrics', async () => {
    const consumer = `test.job.${newId()}`;
    await insertCompleted(database.db, 3, new Date(Date.now() - 30 * DAY), consumer);

    let left = await countInbox(database.db, consumer);
    for (let i = 0; i < 500 && left > 0; i++) {
      await sleep(20);
      left = await countInbox(database.db, consumer);
    }
    assert.equal(left, 0, 'the job pruned the old rows');
    assert.ok((sample(await scrape(app), 'inbox_pruned_rows_total', { table: 'inbox' }) ?? 0) >= 3);
  });
});

describe('retention and shutdown settings', () => {
  test('defaults: prune hourly in batches of 1000; 10 s of grace on shutdown', () => {
    const config = loadConfig({});
    assert.equal(config.inboxPruneIntervalMs, 3_600_000);
    assert.equal(config.inboxPruneBatchSize, 1000);
    assert.equal(config.shutdownGraceMs, 10_000);
  });

  test('INBOX_PRUNE_INTERVAL_MS=0 is allowed (the job is off); bad values name their variable', () => {
    assert.equal(loadConfig({ INBOX_PRUNE_INTERVAL_MS: '0' }).inboxPruneIntervalMs, 0);
    for (const [name, value] of [
      ['INBOX_PRUNE_INTERVAL_MS', '-1'],
      ['INBOX_PRUNE_BATCH_SIZE', '0'],
      ['INBOX_PRUNE_BATCH_SIZE', 'many'],
      ['SHUTDOWN_GRACE_MS', '0'],
    ] as const) {
      assert.throws(
        () => loadConfig({ [name]: value }),
        (error: unknown) => error instanceof ConfigError && error.message.includes(name),
      );
    }
  });
});
