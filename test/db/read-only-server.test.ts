import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import { createDatabase } from '../../src/schema/create-database.js';
import { postgresDatabase, skipUnlessPostgres, type TestDatabaseHandle } from '../support/databases.js';
import { eventually } from '../support/observe.js';
import {
  inboxRows,
  json,
  orderPlaced,
  placeOrder,
  reservedOf,
  seedBook,
  testApp,
  type CommandAnswer,
  type Problem,
} from '../support/fixtures.js';

const POOL_MAX = 3;

/** Runs statements on a connection of the test's own, outside the service's pool. */
async function withAdmin<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url, application_name: 'test-admin' });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/**
 * After a failover the address the service writes to can lead to a standby for a while (the old primary
 * demoted, a proxy whose health check has not caught up): every write is refused with SQLSTATE 25006.
 * Here the server refuses writes the same way (default_transaction_read_only on the database, for new
 * sessions). The service answers 503 database-unavailable with Retry-After, records nothing, and drops
 * each connection that met the refusal, so once writes are accepted again it recovers without a restart.
 */
describe('a server that refuses writes as read-only (25006), on postgres', { skip: skipUnlessPostgres }, () => {
  let database: TestDatabaseHandle;
  let app: FastifyInstance;
  let name: string;

  before(async () => {
    database = await postgresDatabase!.open();
    name = new URL(database.url).pathname.slice(1);
    const pool = await createDatabase(database.url, { lockTimeoutMs: 5000, poolMax: POOL_MAX });
    app = await testApp({ ...pool, url: database.url });
  });
  after(async () => {
    await app?.close();
    await database?.close();
  });

  test('503 database-unavailable with Retry-After while writes are refused; afterwards the retry is 201 once', async () => {
    const book = await seedBook(app, 10);
    const message = orderPlaced(book, 2);

    // New sessions are read-only; the service's current connections end, so it reconnects into that.
    await withAdmin(database.url, async (admin) => {
      await admin.query(`alter database "${name}" set default_transaction_read_only = on`);
      await admin.query(
        `select pg_terminate_backend(pid) from pg_stat_activity where datname = $1 and application_name = 'bookstore-inventory'`,
        [name],
      );
      assert.ok(
        await eventually(async () => {
          const { rows } = await admin.query<{ n: string }>(
            `select count(*) as n from pg_stat_activity where datname = $1 and application_name = 'bookstore-inventory'`,
            [name],
          );
          return rows[0]?.n === '0';
        }),
      );
    });

    // Every connection the pool opens now is read-only: each attempt is refused, and nothing is recorded.
    for (let attempt = 0; attempt < POOL_MAX + 1; attempt++) {
      const refused = await placeOrder(app, message);
      assert.equal(refused.statusCode, 503, refused.body);
      assert.match(refused.headers['content-type'] as string, /^application\/problem\+json/);
      assert.equal(json<Problem>(refused).type, '/problems/database-unavailable');
      assert.ok(Number(refused.headers['retry-after']) >= 1);
    }
    assert.equal(await reservedOf(database.db, book), 0);
    assert.equal((await inboxRows(database.db, message.messageId)).length, 0);

    // Writes accepted again for new sessions. Connections still open keep their read-only default, so a
    // retry can meet one more refusal; each refused connection is dropped, and the pool holds POOL_MAX at most.
    await withAdmin(database.url, async (admin) => {
      await admin.query('set default_transaction_read_only = off');
      await admin.query(`alter database "${name}" reset default_transaction_read_only`);
    });
    const answers: number[] = [];
    for (let attempt = 0; attempt <= POOL_MAX && !answers.includes(201); attempt++) {
      answers.push((await placeOrder(app, message)).statusCode);
    }
    assert.equal(answers.at(-1), 201, `answers while connections were replaced: ${answers.join(', ')}`);
    assert.ok(
      answers.slice(0, -1).every((s) => s === 503),
      answers.join(', '),
    );
    const replay = await placeOrder(app, message);
    assert.equal(replay.statusCode, 200);
    assert.equal(json<CommandAnswer>(replay).outcome.result, 'reserved');
    assert.equal(await reservedOf(database.db, book), 2, 'applied once');
  });
});
