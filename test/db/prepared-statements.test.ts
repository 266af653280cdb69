import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'kysely';
import pg from 'pg';
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
