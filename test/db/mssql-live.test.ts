import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import { createDatabase, DatabasePermissionError } from '../../src/schema/create-database.js';
import { READ_COMMITTED_SNAPSHOT_SQL } from '../../src/schema/mssql.js';
import { isPoolExhausted } from '../../src/db/dialect.js';
import { MSSQL_MAX_DELETE_BATCH } from '../../src/db/engines/mssql.js';
import { migrateToLatest, MIGRATION_NAMES } from '../../src/schema/migrate.js';
import { claimKey } from '../../src/inbox/inbox.repository.js';
import { pruneCompletedInbox } from '../../src/inbox/retention.js';
import { mssqlUrl, testDatabases, type TestDatabaseHandle } from '../support/databases.js';
import {
  admin,
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
 * The six SQL Server behaviours a compile-level test cannot show, on a live server (MSSQL_URL).
 * Each test names the behaviour; the statements and error mappings behind them are checked on every
 * run by mssql-dialect.test.ts and dialect.test.ts.
 */
const target = testDatabases.find((d) => d.name === 'mssql');

describe('SQL Server, live', { skip: target ? false : 'MSSQL_URL is not set', timeout: 300_000 }, () => {
  let database: TestDatabaseHandle;
  const now = new Date();

  before(async () => {
    database = await target!.open();
  });
  after(async () => {
    await database?.close();
  });

  /** Holds a transaction open until the returned release is called; resolves once `hold` has run in it. */
  async function holdTransaction(
    hold: (trx: Parameters<Parameters<ReturnType<typeof database.db.transaction>['execute']>[0]>[0]) => Promise<unknown>,
  ) {
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let ready!: () => void;
    const isReady = new Promise<void>((resolve) => (ready = resolve));
    const done = database.db.transaction().execute(async (trx) => {
      await hold(trx);
      ready();
      await released;
    });
    await Promise.race([isReady, done]);
    return async () => {
      release();
      await done;
    };
  }

  test('1. readers do not wait behind writers: READ_COMMITTED_SNAPSHOT is on, GET /stock answers while a command holds the row', async () => {
    const { rows } = await sql<{ rcsi: number }>`${sql.raw(READ_COMMITTED_SNAPSHOT_SQL)}`.execute(database.db);
    assert.equal(rows[0]?.rcsi, 1);

    let held!: () => void;
    const isHeld = new Promise<void>((resolve) => (held = resolve));
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const app = await testApp(database, {
      config: { inboxPruneIntervalMs: 0 },
      testHooks: {
        beforeCommit: async () => {
          held();
          await released;
        },
      },
    });
    try {
      const dune = await seedBook(app, 10);
      const command = placeOrder(app, orderPlaced(dune, 2));
      await isHeld;
      const read = await app.inject({ url: `/stock/${dune}` });
      assert.equal(read.statusCode, 200, read.body);
      assert.equal(json<Stock>(read).reserved, 0, 'the last committed version');
      release();
      assert.equal((await command).statusCode, 201);
      assert.equal(json<Stock>(await app.inject({ url: `/stock/${dune}` })).reserved, 2);
    } finally {
      release();
      await app.close();
    }
  });

  test('1b. a write that waits past LOCK_TIMEOUT outside the claim (1222) is a 503 database-busy, not a 500', async () => {
    const narrow = await createDatabase(database.url, { lockTimeoutMs: 500 });
    const app = await testApp({ ...narrow, url: database.url }, { config: { inboxPruneIntervalMs: 0 } });
    try {
      const dune = await seedBook(app, 10);
      const unlock = await holdTransaction((trx) =>
        sql`SELECT book_id FROM stock_items WITH (UPDLOCK, ROWLOCK) WHERE book_id = ${dune}`.execute(trx),
      );
      const busy = await app.inject({ method: 'PUT', url: `/stock/${dune}`, headers: admin, payload: { title: 'Dune', onHand: 12 } });
      await unlock();
      assert.equal(busy.statusCode, 503, busy.body);
      assert.equal(json<Problem>(busy).type, '/problems/database-busy');
      assert.equal(busy.headers['retry-after'], '2');
    } finally {
      await app.close();
      await narrow.close();
    }
  });

  test('2 and 3. every pooled session has NOCOUNT and XACT_ABORT off and the lock bound, whatever the server defaults', async () => {
    const { rows } = await sql<{ o: number; t: number }>`SELECT @@OPTIONS AS o, @@LOCK_TIMEOUT AS t`.execute(database.db);
    assert.equal(rows[0]!.o & 512, 0, 'NOCOUNT off');
    assert.equal(rows[0]!.o & 16384, 0, 'XACT_ABORT off');
    assert.equal(rows[0]!.t, 5000);
    const app = await testApp(database, { config: { inboxPruneIntervalMs: 0 } });
    try {
      const dune = await seedBook(app, 10);
      const res = await placeOrder(app, orderPlaced(dune, 2));
      assert.equal(json<CommandAnswer>(res).outcome.result, 'reserved', 'row counts reach the service');
      assert.equal(await reservedOf(database.db, dune), 2);
    } finally {
      await app.close();
    }
  });

  test('3. a duplicate claim ends only its statement: the transaction goes on (XACT_ABORT off)', async () => {
    const claim = {
      messageId: `x-${newId()}`,
      consumer: 'test.xact',
      keySource: 'body' as const,
      fingerprint: 'f'.repeat(64),
      receivedAt: now,
    };
    assert.equal(await claimKey(database.db, claim), true);
    const after = await database.db.transaction().execute(async (trx) => {
      assert.equal(await claimKey(trx, claim), false);
      const { rows } = await sql<{ one: number }>`SELECT 1 AS one`.execute(trx);
      return rows[0]!.one;
    });
    assert.equal(after, 1);
  });

  test('4. least privilege: a login with DDL rights on its database only migrates it (no master, no db_owner); a database it cannot open is a permission error', async () => {
    const login = `bookstore_ddl_${randomBytes(4).toString('hex')}`;
    const password = `Ddl!${randomBytes(12).toString('hex')}aA1`;
    const fresh = await target!.open();
    const masterUrl = new URL(mssqlUrl!.replace(/^sqlserver:/, 'mssql:'));
    const master = await createDatabase(masterUrl.toString(), { lockTimeoutMs: 5000 });
    try {
      await sql`CREATE LOGIN ${sql.id(login)} WITH PASSWORD = ${sql.lit(password)}, CHECK_POLICY = OFF`.execute(master.db);
      // open() only creates the database: the restricted login runs every migration itself.
      await sql`CREATE USER ${sql.id(login)} FOR LOGIN ${sql.id(login)}`.execute(fresh.db);
      for (const role of ['db_ddladmin', 'db_datareader', 'db_datawriter']) {
        await sql`ALTER ROLE ${sql.id(role)} ADD MEMBER ${sql.id(login)}`.execute(fresh.db);
      }
      const url = new URL(fresh.url);
      url.username = login;
      url.password = encodeURIComponent(password);
      const restricted = await createDatabase(url.toString(), { lockTimeoutMs: 5000 });
      try {
        assert.deepEqual(await migrateToLatest(restricted.db), [...MIGRATION_NAMES]);
      } finally {
        await restricted.close();
      }
      const elsewhere = new URL(url);
      elsewhere.pathname = `/bookstore_missing_${randomBytes(4).toString('hex')}`;
      await assert.rejects(
        createDatabase(elsewhere.toString(), { lockTimeoutMs: 5000 }),
        (error: unknown) => error instanceof DatabasePermissionError,
      );
    } finally {
      await fresh.close();
      await sql`IF SUSER_ID(${login}) IS NOT NULL DROP LOGIN ${sql.id(login)}`.execute(master.db).catch(() => {});
      await master.close();
    }
  });

  test('5. a prune batch never escalates to a table lock: a held claim survives and nothing was promoted', async () => {
    const consumer = `test.escalation.${newId()}`;
    const old = new Date(Date.now() - 30 * 86_400_000);
    for (let i = 0; i < 6; i++) {
      await database.db
        .insertInto('inbox')
        .values(
          Array.from({ length: 1000 }, () => ({
            message_id: `old-${newId()}`,
            consumer,
            key_source: 'body',
            fingerprint: 'f'.repeat(64),
            received_at: old,
            completed_at: old,
            outcome: '{}',
            lease_until: null,
          })),
        )
        .execute();
    }
    const heldId = `held-${newId()}`;
    const unlock = await holdTransaction((trx) =>
      claimKey(trx, { messageId: heldId, consumer, keySource: 'body', fingerprint: 'e'.repeat(64), receivedAt: old }),
    );
    try {
      const result = await pruneCompletedInbox(database.db, new Date(Date.now() - 14 * 86_400_000), { batchSize: 10_000 });
      assert.ok(
        result.batches.every((b) => b <= MSSQL_MAX_DELETE_BATCH),
        `batches ${result.batches.join(', ')}`,
      );
      assert.ok(result.deleted >= 6000);
    } finally {
      await unlock();
    }
    const { rows } = await sql<{ promoted: number | null }>`SELECT SUM(index_lock_promotion_count) AS promoted
      FROM sys.dm_db_index_operational_stats(DB_ID(), OBJECT_ID('inbox'), NULL, NULL)`.execute(database.db);
    assert.equal(Number(rows[0]?.promoted ?? 0), 0, 'no lock escalation on inbox');
  });

  test('6. a full pool is exhaustion, not unavailability', async () => {
    const small = await createDatabase(database.url, { lockTimeoutMs: 5000, poolMax: 1, connectTimeoutMs: 1000 });
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let holding!: () => void;
    const held = new Promise<void>((resolve) => (holding = resolve));
    const holder = small.db.transaction().execute(async (trx) => {
      await sql`SELECT 1`.execute(trx);
      holding();
      await released;
    });
    try {
      await held;
      await assert.rejects(sql`SELECT 2`.execute(small.db), (error: unknown) => isPoolExhausted(error));
    } finally {
      release();
      await holder;
      await small.close();
    }
  });
});
