import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { createDatabase, type DatabaseHandle } from '../../src/schema/create-database.js';
import { CommitCutProxy } from '../support/commit-cut-proxy.js';
import { postgresDatabase, skipUnlessPostgres, type TestDatabaseHandle } from '../support/databases.js';
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

/**
 * A connection lost while COMMIT is under way leaves the service not knowing whether its transaction
 * committed: the server may have run the COMMIT (a failover's old primary, a network cut after the last
 * packet left) or never seen it. The service must not guess: it answers 503 database-unavailable with
 * Retry-After, and the client's retry settles it through the inbox: a replay (200) of the committed
 * outcome, or the command applied now (201). A real proxy between the service and PostgreSQL cuts the
 * connection at the COMMIT, once after forwarding it, once instead.
 */
describe('a commit whose outcome is unknown, on postgres', { skip: skipUnlessPostgres }, () => {
  let database: TestDatabaseHandle;
  let proxy: CommitCutProxy;
  let proxied: DatabaseHandle;
  let app: FastifyInstance;

  before(async () => {
    database = await postgresDatabase!.open();
    const target = new URL(database.url);
    proxy = await CommitCutProxy.start(target.hostname, Number(target.port || 5432));
    proxied = await createDatabase(proxy.url(database.url), { lockTimeoutMs: 5000, poolMax: 4 });
    app = await testApp({ ...proxied, url: proxy.url(database.url) });
  });
  after(async () => {
    await app?.close();
    await proxy?.close();
    await database?.close();
  });

  test('COMMIT reached the server, the answer never came: 503 with Retry-After, and the retry is a 200 replay of what committed', async () => {
    const book = await seedBook(app, 10);
    const message = orderPlaced(book, 3);

    proxy.cutAtNextCommit('forward');
    const lost = await placeOrder(app, message);
    assert.equal(proxy.cuts, 1, 'the connection was cut at the COMMIT');
    assert.equal(lost.statusCode, 503, `not a 201 for a commit the service never saw succeed: ${lost.body}`);
    assert.equal(json<Problem>(lost).type, '/problems/database-unavailable');
    assert.ok(Number(lost.headers['retry-after']) >= 1);
    // The server runs what it was sent after the service's side is gone: wait for its answer.
    await proxy.forwardedAnswered;
    // The server did commit: the outcome is recorded, the stock reserved.
    assert.equal(await reservedOf(database.db, book), 3);
    const [row] = await inboxRows(database.db, message.messageId);
    assert.ok(row?.completed_at, 'the inbox row is complete');

    const retry = await placeOrder(app, message);
    assert.equal(retry.statusCode, 200, retry.body);
    assert.equal(retry.headers['idempotent-replayed'], 'true');
    assert.equal(json<CommandAnswer>(retry).outcome.result, 'reserved');
    assert.equal(await reservedOf(database.db, book), 3, 'applied once');
    assert.equal((await inboxRows(database.db, message.messageId)).length, 1);
  });

  test('COMMIT never reached the server: 503 with Retry-After, nothing recorded, and the retry applies it: 201 once', async () => {
    const book = await seedBook(app, 10);
    const message = orderPlaced(book, 2);

    proxy.cutAtNextCommit('drop');
    const cutsBefore = proxy.cuts;
    const lost = await placeOrder(app, message);
    assert.equal(proxy.cuts, cutsBefore + 1);
    assert.equal(lost.statusCode, 503, lost.body);
    assert.equal(json<Problem>(lost).type, '/problems/database-unavailable');
    assert.ok(Number(lost.headers['retry-after']) >= 1);
    assert.equal(await reservedOf(database.db, book), 0, 'the transaction did not commit');
    assert.equal((await inboxRows(database.db, message.messageId)).length, 0);

    const retry = await placeOrder(app, message);
    assert.equal(retry.statusCode, 201, retry.body);
    assert.equal(json<CommandAnswer>(retry).outcome.result, 'reserved');
    const replay = await placeOrder(app, message);
    assert.equal(replay.statusCode, 200);
    assert.equal(await reservedOf(database.db, book), 2);
  });
});
