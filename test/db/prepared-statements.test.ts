import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import pg from 'pg';
import { createDatabase, type DatabaseHandle } from '../../src/schema/create-database.js';
import { DeferredWrites } from '../../src/db/dialect.js';
import { compiled } from '../../src/db/json-rows.js';
import { CommitCutProxy } from '../support/commit-cut-proxy.js';
import { postgresDatabase, skipUnlessPostgres, type TestDatabaseHandle } from '../support/databases.js';

describe('named prepared statements, on postgres', { skip: skipUnlessPostgres }, () => {
  let database: TestDatabaseHandle;

  before(async () => {
    database = await postgresDatabase!.open();
  });
  after(async () => {
    await database?.close();
  });

  test('a parameterised statement is prepared once on its connection and reused', async () => {
    const prepared = await database.db.connection().execute(async (conn) => {
      for (let i = 0; i < 3; i++) {
        await sql`select ${i}::int + 1 as n, 'prepared-statements-test' as tag`.execute(conn);
      }
      return sql<{ statement: string }>`select statement from pg_prepared_statements`.execute(conn);
    });
    const mine = prepared.rows.filter((r) => r.statement.includes('prepared-statements-test'));
    assert.equal(mine.length, 1);
  });

  describe("a transaction's BEGIN goes out with its first statement", () => {
    let proxy: CommitCutProxy;
    let proxied: DatabaseHandle;

    before(async () => {
      await sql`create table begin_probe (id int primary key, note text not null)`.execute(database.db);
      const target = new URL(database.url);
      proxy = await CommitCutProxy.start(target.hostname, Number(target.port || 5432));
      proxied = await createDatabase(proxy.url(database.url), { lockTimeoutMs: 5000, poolMax: 1 });
    });
    after(async () => {
      await proxied?.close();
      await proxy?.close();
    });

    /** The round trips `work` took through the proxy, and what it returned. */
    async function counted<T>(work: () => Promise<T>): Promise<{ roundTrips: number; result: T }> {
      const before = proxy.roundTrips;
      const result = await work();
      return { roundTrips: proxy.roundTrips - before, result };
    }

    const insert = (id: number, note: string) => (db: typeof proxied.db) =>
      sql`insert into begin_probe (id, note) values (${id}, ${note}) returning id`.execute(db);

    test('a one-statement transaction takes two round trips (statement with BEGIN, COMMIT), and commits', async () => {
      // The connection's first transaction prepares its BEGIN; the later ones send it with their first statement.
      await proxied.db.transaction().execute((trx) => insert(1, 'first')(trx));
      const { roundTrips, result } = await counted(() => proxied.db.transaction().execute((trx) => insert(2, 'second')(trx)));
      assert.equal(roundTrips, 2);
      assert.deepEqual(result.rows, [{ id: 2 }], "the statement's own result, not the BEGIN's");
      const { rows } = await sql<{ id: number }>`select id from begin_probe order by id`.execute(database.db);
      assert.deepEqual(
        rows.map((r) => r.id),
        [1, 2],
      );
    });

    test('the statements after the first run inside the same transaction: a later failure rolls back the first', async () => {
      await assert.rejects(
        proxied.db.transaction().execute(async (trx) => {
          await insert(3, 'kept only if the next succeeds')(trx);
          await insert(1, 'a duplicate key')(trx);
        }),
        (error: { code?: string }) => error.code === '23505',
      );
      const { rows } = await sql<{ n: number }>`select count(*)::int as n from begin_probe where id = 3`.execute(database.db);
      assert.deepEqual(rows, [{ n: 0 }]);
    });

    test('a first statement that fails leaves nothing and the connection goes on: the next transaction commits', async () => {
      await assert.rejects(
        proxied.db.transaction().execute((trx) => insert(1, 'a duplicate key')(trx)),
        (error: { code?: string }) => error.code === '23505',
      );
      await proxied.db.transaction().execute((trx) => insert(4, 'after a failed first statement')(trx));
      const { rows } = await sql<{ note: string }>`select note from begin_probe where id in (1, 4) order by id`.execute(database.db);
      assert.deepEqual(
        rows.map((r) => r.note),
        ['first', 'after a failed first statement'],
      );
    });

    test('deferred writes flushed with commit take the COMMIT into their round trip: two round trips for a read and the writes', async () => {
      await proxied.db.transaction().execute(async (trx) => {
        const writes = new DeferredWrites(trx);
        await writes.add(compiled(sql`insert into begin_probe (id, note) values (${10}, ${'warm-up'})`.compile(trx)), {
          rows: 1,
          what: 'the probe row',
        });
        await writes.flush({ commit: true });
      });
      const { roundTrips } = await counted(() =>
        proxied.db.transaction().execute(async (trx) => {
          await sql`select count(*) from begin_probe where id = ${11}`.execute(trx);
          const writes = new DeferredWrites(trx);
          await writes.add(compiled(sql`insert into begin_probe (id, note) values (${11}, ${'with its commit'})`.compile(trx)), {
            rows: 1,
            what: 'the probe row',
          });
          await writes.add(compiled(sql`update begin_probe set note = ${'updated'} where id = ${10}`.compile(trx)), {
            rows: 1,
            what: 'the update',
          });
          await writes.flush({ commit: true });
        }),
      );
      assert.equal(roundTrips, 2, 'BEGIN with the read, then the writes with the COMMIT');
      const { rows } = await sql<{ id: number; note: string }>`select id, note from begin_probe where id in (10, 11) order by id`.execute(
        database.db,
      );
      assert.deepEqual(rows, [
        { id: 10, note: 'updated' },
        { id: 11, note: 'with its commit' },
      ]);
    });

    test('a deferred write that changes fewer rows than expected fails the statement, so its COMMIT never runs: nothing is kept', async () => {
      await assert.rejects(
        proxied.db.transaction().execute(async (trx) => {
          await sql`select 1`.execute(trx);
          const writes = new DeferredWrites(trx);
          await writes.add(compiled(sql`insert into begin_probe (id, note) values (${12}, ${'rolled back'})`.compile(trx)), {
            rows: 1,
            what: 'the probe row',
          });
          await writes.add(compiled(sql`update begin_probe set note = ${'x'} where id = ${999}`.compile(trx)), {
            rows: 1,
            what: 'the missing row',
          });
          await writes.flush({ commit: true });
        }),
        (error: { code?: string; message?: string }) =>
          error.code === '22P02' && /the missing row: changed 0 rows, expected 1/.test(error.message ?? ''),
      );
      const { rows } = await sql<{ n: number }>`select count(*)::int as n from begin_probe where id = 12`.execute(database.db);
      assert.deepEqual(rows, [{ n: 0 }]);
      // The connection goes on: its next transaction commits.
      await proxied.db.transaction().execute(async (trx) => {
        const writes = new DeferredWrites(trx);
        await writes.add(compiled(sql`insert into begin_probe (id, note) values (${13}, ${'next'})`.compile(trx)), {
          rows: 1,
          what: 'the probe row',
        });
        await writes.flush({ commit: true });
      });
      const next = await sql<{ n: number }>`select count(*)::int as n from begin_probe where id = 13`.execute(database.db);
      assert.deepEqual(next.rows, [{ n: 1 }]);
    });

    test('a transaction that ends before any statement sends nothing', async () => {
      const { roundTrips } = await counted(() => proxied.db.transaction().execute(async () => 'nothing to do'));
      assert.equal(roundTrips, 0);
    });
  });

  test('a statement whose result type changed under it fails once, then is prepared afresh', async () => {
    await sql`create table prep_probe (id int primary key, a text)`.execute(database.db);
    await sql`insert into prep_probe values (1, 'x')`.execute(database.db);
    await database.db.connection().execute(async (conn) => {
      const read = () =>
        conn
          .selectFrom('prep_probe' as never)
          .selectAll()
          .where('id' as never, '=', 1 as never)
          .execute();
      assert.deepEqual(await read(), [{ id: 1, a: 'x' }]);

      // Another instance's migration adds a column, on another connection.
      const other = new pg.Client({ connectionString: database.url });
      await other.connect();
      try {
        await other.query(`alter table prep_probe add column b text default 'y'`);
      } finally {
        await other.end();
      }

      await assert.rejects(read(), (error: { code?: string }) => error.code === '0A000');
      assert.deepEqual(await read(), [{ id: 1, a: 'x', b: 'y' }]);
    });
  });
});
