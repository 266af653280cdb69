import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { reportMissingDatabases, serverDatabases, type TestDatabaseHandle } from '../support/databases.js';
import { ADMIN_TOKEN, newId, orderPlaced, reservedOf } from '../support/fixtures.js';
import { sessionsWaitingOnLocks, waitUntilBlocked } from '../support/observe.js';
import { postJson, seamServers, type ServerProcess } from '../support/server-process.js';

/** A request in flight whose answer can be looked at without waiting for it. */
function track<T>(pending: Promise<T>) {
  const state: { done: boolean; value: Promise<T> } = { done: false, value: pending };
  state.value = pending.finally(() => {
    state.done = true;
  });
  return state;
}

/**
 * Two copies of one message at the same moment, in two service processes on real sockets, on a
 * database server. The first copy holds its claim open (the seam holds its transaction until the test
 * releases it); the test asks the database whether the second copy's statement really waits on a
 * lock, then releases the first and checks what each answered. No step waits for time.
 */
reportMissingDatabases((name) => `two copies at once, two processes, on ${name}`);

for (const target of serverDatabases) {
  describe(`two copies at once, two processes, on ${target.name}`, { timeout: 180_000 }, () => {
    let database: TestDatabaseHandle;
    let holder: ServerProcess;
    let other: ServerProcess;
    const { started: servers, start, seed } = seamServers(() => database.url, ADMIN_TOKEN);

    before(async () => {
      database = await target.open();
      [holder, other] = await Promise.all([start({ SEAM_HOLD: 'until-released' }), start({})]);
    });
    after(async () => {
      for (const server of servers) server.release();
      await Promise.all(servers.map((s) => s.stop()));
      await database?.close();
    });

    test('A holds its claim; B, sent to the other process, is seen blocked on it; A commits: A 201, B 200 with the same outcome', async () => {
      const dune = await seed(other, 10);
      const message = orderPlaced(dune, 2);

      const a = track(postJson(`${holder.baseUrl}/inventory/order-placed`, message));
      await holder.held(message.messageId);
      assert.equal(await sessionsWaitingOnLocks(database), 0, 'nothing waits before B arrives');
      const b = track(postJson(`${other.baseUrl}/inventory/order-placed`, message));
      await waitUntilBlocked(database);
      assert.equal(b.done, false, 'B has not answered while it waits on A');
      assert.equal(a.done, false);

      holder.release();
      const [first, second] = await Promise.all([a.value, b.value]);
      assert.equal(first.status, 201);
      assert.equal(second.status, 200);
      assert.equal(second.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(second.body?.outcome, first.body?.outcome);
      assert.equal(await reservedOf(database.db, dune), 2);
      assert.equal(await sessionsWaitingOnLocks(database), 0);
    });

    test('A holds its claim and then fails before commit; B, seen blocked on it, processes the message: 201', async () => {
      const failing = await start({ SEAM_HOLD: 'until-released', SEAM_FAIL: '1' });
      const dune = await seed(other, 10);
      const message = orderPlaced(dune, 2);

      const a = track(postJson(`${failing.baseUrl}/inventory/order-placed`, message));
      await failing.held(message.messageId);
      const b = track(postJson(`${other.baseUrl}/inventory/order-placed`, message));
      await waitUntilBlocked(database);
      assert.equal(b.done, false, 'B waits on A');

      failing.release();
      const [first, second] = await Promise.all([a.value, b.value]);
      assert.equal(first.status, 500);
      assert.equal(second.status, 201, 'the claim was rolled back with A, so B wins it');
      assert.equal(second.body?.outcome?.result, 'reserved');
      assert.equal(await reservedOf(database.db, dune), 2);
      await failing.stop();
    });

    test('a copy that waits longer than INBOX_LOCK_TIMEOUT_MS gets 409 in-flight with Retry-After while A still holds; its retry after A commits gets 200', async () => {
      const impatient = await start({ INBOX_LOCK_TIMEOUT_MS: '1000' });
      const dune = await seed(impatient, 10);
      const message = orderPlaced(dune, 2);

      const a = track(postJson(`${holder.baseUrl}/inventory/order-placed`, message));
      await holder.held(message.messageId);
      const second = await postJson(`${impatient.baseUrl}/inventory/order-placed`, message);

      assert.equal(a.done, false, 'A still holds its claim: B gave up on its own bound');
      assert.equal(second.status, 409);
      assert.match(second.headers.get('content-type') ?? '', /^application\/problem\+json/);
      assert.equal(second.body?.type, '/problems/in-flight');
      assert.equal(second.headers.get('retry-after'), '1');
      // A lower bound only: B cannot give up before its lock timeout, however loaded the machine.
      assert.ok(second.ms >= 900, `B gave up after ${second.ms.toFixed(0)} ms, not before the lock timeout`);

      holder.release();
      const first = await a.value;
      assert.equal(first.status, 201);
      const retry = await postJson(`${impatient.baseUrl}/inventory/order-placed`, message);
      assert.equal(retry.status, 200);
      assert.deepEqual(retry.body?.outcome, first.body?.outcome);
      assert.equal(await reservedOf(database.db, dune), 2);
      await impatient.stop();
    });

    test('two cancellations of one order under different message ids at once: B is seen blocked on A; the stock comes back once', async () => {
      const dune = await seed(other, 10);
      const order = orderPlaced(dune, 3);
      assert.equal((await postJson(`${other.baseUrl}/inventory/order-placed`, order)).status, 201);
      assert.equal(await reservedOf(database.db, dune), 3);
      const cancelA = { messageId: `cancel-a-${newId()}`, data: { orderId: order.data.orderId } };
      const cancelB = { messageId: `cancel-b-${newId()}`, data: { orderId: order.data.orderId } };

      const a = track(postJson(`${holder.baseUrl}/inventory/order-cancelled`, cancelA));
      await holder.held(cancelA.messageId);
      const b = track(postJson(`${other.baseUrl}/inventory/order-cancelled`, cancelB));
      await waitUntilBlocked(database);
      assert.equal(b.done, false, "B waits on A's release of the reservation");

      holder.release();
      const [first, second] = await Promise.all([a.value, b.value]);
      assert.equal(first.status, 201);
      assert.equal(first.body?.outcome?.result, 'released');
      assert.equal(second.status, 201, 'a different message: processed, with its own outcome');
      assert.equal(second.body?.outcome?.result, 'not-reserved', 'A already gave the stock back');
      assert.equal(await reservedOf(database.db, dune), 0, 'released once, not twice');
    });
  });
}
