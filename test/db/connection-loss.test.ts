import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import pg from 'pg';
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
  type Problem,
  type CommandAnswer,
} from '../support/fixtures.js';

/**
 * Ends every pooled service connection to the test database, as an operator or a failover would, and
 * returns once those backends are gone (the server has closed their sockets). Returns how many.
 */
async function terminateServiceConnections(url: string): Promise<number> {
  const admin = new pg.Client({ connectionString: url, application_name: 'test-admin' });
  await admin.connect();
  try {
    const { rows } = await admin.query<{ pid: number; ok: boolean }>(
      `select pid, pg_terminate_backend(pid) as ok from pg_stat_activity
        where datname = current_database() and application_name = 'bookstore-inventory' and pid <> pg_backend_pid()`,
    );
    const pids = rows.filter((r) => r.ok).map((r) => r.pid);
    const gone = await eventually(async () => {
      const { rows: left } = await admin.query<{ n: string }>('select count(*) as n from pg_stat_activity where pid = any($1)', [pids]);
      return Number(left[0]!.n) === 0;
    });
    assert.ok(gone, 'the terminated backends exited');
    return pids.length;
  } finally {
    await admin.end();
  }
}

/**
 * Found by the torture run (scripts/torture/): pg_terminate_backend of a connection that a
 * transaction held between two statements made pg emit 'error' on a checked-out client, where
 * pg-pool does not listen, and the whole service process died of an uncaught error.
 */
describe('a connection killed inside a command transaction, on postgres', { skip: skipUnlessPostgres }, () => {
  let database: TestDatabaseHandle;
  let app: FastifyInstance;
  let killInsideNextCommit = false;

  before(async () => {
    database = await postgresDatabase!.open();
    app = await testApp(database, {
      testHooks: {
        beforeCommit: async () => {
          if (!killInsideNextCommit) return;
          killInsideNextCommit = false;
          // Returns once the backend is gone: the commit that follows meets a closed connection.
          assert.ok((await terminateServiceConnections(database.url)) >= 1);
        },
      },
    });
  });
  after(async () => {
    await app?.close();
    await database?.close();
  });

  test('answers 503 database-unavailable with Retry-After, records nothing, and the process serves the retry: 201 once', async () => {
    const book = await seedBook(app, 10);
    const message = orderPlaced(book, 2);

    killInsideNextCommit = true;
    const lost = await placeOrder(app, message);
    assert.equal(lost.statusCode, 503);
    assert.match(lost.headers['content-type'] as string, /^application\/problem\+json/);
    assert.equal(json<Problem>(lost).type, '/problems/database-unavailable');
    assert.ok(Number(lost.headers['retry-after']) >= 1);
    assert.equal(await reservedOf(database.db, book), 0, 'the transaction did not commit');
    assert.equal((await inboxRows(database.db, message.messageId)).length, 0);

    const retry = await placeOrder(app, message);
    assert.equal(retry.statusCode, 201);
    assert.equal(json<CommandAnswer>(retry).outcome.result, 'reserved');
    const replay = await placeOrder(app, message);
    assert.equal(replay.statusCode, 200);
    assert.equal(await reservedOf(database.db, book), 2);
  });
});
