import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { postgresDatabase, skipUnlessPostgres, type TestDatabaseHandle } from '../support/databases.js';
import { holdStockRow, orderPlaced, seedBook, stockRow, tableCounts, testApp } from '../support/fixtures.js';
import { waitUntilBlocked } from '../support/observe.js';

/**
 * HTTP_MAX_COMMANDS_IN_FLIGHT: past it a command is refused as it arrives (503 overloaded, Retry-After),
 * before its body is read; nothing recorded; the bound frees as responses go out. Real sockets: the
 * bound counts until a response's connection says it is done.
 */
describe('admission: commands in flight on one replica', { skip: skipUnlessPostgres }, () => {
  let database: TestDatabaseHandle;
  let app: FastifyInstance;
  let base: string;

  before(async () => {
    database = await postgresDatabase!.open();
    app = await testApp(database, { config: { httpMaxCommandsInFlight: 1, inboxPruneIntervalMs: 0 } });
    await app.listen({ port: 0, host: '127.0.0.1' });
    base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  });
  after(async () => {
    await app?.close();
    await database?.close();
  });

  const post = (body: unknown) =>
    fetch(`${base}/inventory/order-placed`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });

  test('one command in flight (its stock row held): the next is 503 overloaded with Retry-After, nothing recorded; then both bounds free', async () => {
    const bookId = await seedBook(app, 10);
    const held = await holdStockRow(app.db, bookId);
    const first = orderPlaced(bookId, 2);
    const pending = post(first);
    await waitUntilBlocked(database);
    const before = await tableCounts(app.db);

    const refused = await post(orderPlaced(bookId, 1));
    assert.equal(refused.status, 503);
    assert.equal(refused.headers.get('retry-after'), '1');
    assert.match(String(refused.headers.get('content-type')), /^application\/problem\+json/);
    const problem = (await refused.json()) as { type: string; detail: string };
    assert.equal(problem.type, '/problems/overloaded');
    assert.match(problem.detail, /HTTP_MAX_COMMANDS_IN_FLIGHT/);
    assert.deepEqual(await tableCounts(app.db), before, 'the refused command recorded nothing');

    held.release();
    await held.done;
    const answered = await pending;
    assert.equal(answered.status, 201, await answered.text());
    // The first command's response went out: the bound is free again.
    const next = await post(orderPlaced(bookId, 3));
    assert.equal(next.status, 201, await next.text());
    assert.deepEqual(await stockRow(app.db, bookId), { on_hand: 10, reserved: 5 });
  });
});
