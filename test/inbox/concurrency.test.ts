import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { serverDatabases, type TestDatabaseHandle } from '../support/databases.js';
import { ADMIN_TOKEN, orderPlaced, reservedOf } from '../support/fixtures.js';
import { postJson, seedBookOverHttp, startServer, type ServerProcess } from '../support/server-process.js';

/**
 * Two copies of one message at the same moment, in two service processes on real sockets, on a
 * database server where the second claim really blocks on the first transaction's uncommitted row.
 */
for (const target of serverDatabases) {
  describe(`two copies at once, two processes, on ${target.name}`, { timeout: 120_000 }, () => {
    let database: TestDatabaseHandle;
    const servers: ServerProcess[] = [];

    async function start(env: Record<string, string>): Promise<ServerProcess> {
      const server = await startServer({ DATABASE_URL: database.url, ADMIN_TOKEN, ...env });
      servers.push(server);
      return server;
    }

    const seed = (server: ServerProcess, onHand: number) => seedBookOverHttp(server.baseUrl, ADMIN_TOKEN, onHand);

    before(async () => {
      database = await target.open();
    });
    after(async () => {
      await Promise.all(servers.map((s) => s.stop()));
      await database?.close();
    });

    test('A holds its claim 500 ms; B, sent 100 ms later to the other process, waits and answers 200', async () => {
      const holder = await start({ SEAM_HOLD_MS: '500' });
      const other = await start({});
      const dune = await seed(other, 10);
      const message = orderPlaced(dune, 2);

      const first = postJson(`${holder.baseUrl}/inventory/order-placed`, message);
      await sleep(100);
      const second = await postJson(`${other.baseUrl}/inventory/order-placed`, message);
      const a = await first;

      assert.equal(a.status, 201);
      assert.equal(second.status, 200);
      assert.equal(second.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(second.body.outcome, a.body.outcome);
      assert.ok(second.ms >= 300, `B answered after ${second.ms.toFixed(0)} ms: it must have waited on A's claim`);
      assert.equal(await reservedOf(database.db, dune), 2);
      await Promise.all([holder.stop(), other.stop()]);
    });

    test('A holds its claim and then fails before commit; B, waiting on it, processes the message: 201', async () => {
      const failing = await start({ SEAM_HOLD_MS: '500', SEAM_FAIL: '1' });
      const other = await start({});
      const dune = await seed(other, 10);
      const message = orderPlaced(dune, 2);

      const first = postJson(`${failing.baseUrl}/inventory/order-placed`, message);
      await sleep(100);
      const second = await postJson(`${other.baseUrl}/inventory/order-placed`, message);
      const a = await first;

      assert.equal(a.status, 500);
      assert.equal(second.status, 201, 'the claim was rolled back with A, so B wins it');
      assert.ok(second.ms >= 300, `B answered after ${second.ms.toFixed(0)} ms: it must have waited on A's claim`);
      assert.equal(await reservedOf(database.db, dune), 2);
      await Promise.all([failing.stop(), other.stop()]);
    });

    test('a copy that waits longer than INBOX_LOCK_TIMEOUT_MS gets 409 in-flight with Retry-After; its retry after A commits gets 200', async () => {
      const holder = await start({ SEAM_HOLD_MS: '3000' });
      const impatient = await start({ INBOX_LOCK_TIMEOUT_MS: '1000' });
      const dune = await seed(impatient, 10);
      const message = orderPlaced(dune, 2);

      let holderAnswered = false;
      const first = postJson(`${holder.baseUrl}/inventory/order-placed`, message).finally(() => {
        holderAnswered = true;
      });
      await sleep(200);
      const second = await postJson(`${impatient.baseUrl}/inventory/order-placed`, message);
      const answeredBeforeHolder = !holderAnswered;

      assert.equal(second.status, 409);
      assert.match(second.headers.get('content-type') ?? '', /^application\/problem\+json/);
      assert.equal(second.body.type, '/problems/in-flight');
      assert.equal(second.headers.get('retry-after'), '1');
      assert.ok(second.ms >= 900, `B gave up after ${second.ms.toFixed(0)} ms, not before the lock timeout`);
      assert.ok(answeredBeforeHolder, 'B gave up while A still held the claim');

      const a = await first;
      assert.equal(a.status, 201);
      const retry = await postJson(`${impatient.baseUrl}/inventory/order-placed`, message);
      assert.equal(retry.status, 200);
      assert.deepEqual(retry.body.outcome, a.body.outcome);
      assert.equal(await reservedOf(database.db, dune), 2);
      await Promise.all([holder.stop(), impatient.stop()]);
    });
  });
}
