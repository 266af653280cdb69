import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { reportMissingDatabases, type TestDatabaseHandle, testDatabases } from '../support/databases.js';
import { FakeEmailProvider } from '../support/fake-email-provider.js';
import { admin, inboxRows, json, newId, testApp, type Problem, type CommandAnswer, type InboxRecord } from '../support/fixtures.js';
import { eventually } from '../support/observe.js';

const LEASE_MS = 30_000;
const CONSUMER = 'notifications.stock-reserved-email';

function emailMessage() {
  return { messageId: `race-${newId()}`, data: { orderId: newId(), bookId: newId(), quantity: 1, email: 'ada@example.org' } };
}

/** A request in flight whose answer can be looked at without waiting for it. */
function track<T>(pending: Promise<T>) {
  const state: { done: boolean; value: Promise<T> } = { done: false, value: pending };
  state.value = pending.finally(() => {
    state.done = true;
  });
  return state;
}

/**
 * Copies of one email message racing each other while the first copy's provider call is in flight.
 * The provider holds its answer until the test releases it, and the test watches what reached it:
 * each step waits for a state (a request at the provider, an answer), never for time.
 */
reportMissingDatabases((name) => `email copies racing, on ${name}`);
for (const target of testDatabases) {
  describe(`email copies racing, on ${target.name}`, { timeout: 60_000 }, () => {
    let database: TestDatabaseHandle;
    const apps: FastifyInstance[] = [];
    const providers: FakeEmailProvider[] = [];

    before(async () => {
      database = await target.open();
    });
    after(async () => {
      for (const p of providers) p.releaseHeld();
      await Promise.all(apps.map((a) => a.close()));
      await Promise.all(providers.map((p) => p.stop()));
      await database?.close();
    });

    async function setup(deduplicates: boolean, options: { crashAfterSend?: () => boolean; queueLimit?: number } = {}) {
      const provider = new FakeEmailProvider(deduplicates);
      providers.push(provider);
      let offsetMs = 0;
      const app = await testApp(database, {
        now: () => new Date(Date.now() + offsetMs),
        config: {
          emailProvider: 'http',
          emailProviderUrl: await provider.start(),
          emailProviderIdempotent: deduplicates,
          inboxLeaseMs: LEASE_MS,
          inboxPruneIntervalMs: 0,
          ...(options.queueLimit === undefined ? {} : { inboxQueueLimit: options.queueLimit }),
        },
        testHooks: {
          afterSideEffect: async () => {
            if (options.crashAfterSend?.()) throw new Error('injected crash after the email was sent');
          },
        },
      });
      apps.push(app);
      const send = (message: unknown) =>
        app.inject({ method: 'POST', url: '/notifications/stock-reserved-email', payload: message as object });
      const reconcile = (message: { messageId: string }, resolution: 'completed' | 'release') =>
        app.inject({
          method: 'POST',
          url: `/inbox/${CONSUMER}/${encodeURIComponent(message.messageId)}/reconcile`,
          headers: admin,
          payload: { resolution },
        });
      return { provider, send, reconcile, advance: (ms: number) => (offsetMs += ms) };
    }

    /** Ends the lease of the message's record in the database, as if its attempt had been running too long. */
    async function expireLease(message: { messageId: string }) {
      await database.db
        .updateTable('inbox')
        .set({ lease_until: new Date(Date.now() - 1000) })
        .where('message_id', '=', message.messageId)
        .execute();
    }

    test('a copy arriving while the first is at the provider: 409 in-flight at once; the first then records 201; one email', async () => {
      const { provider, send } = await setup(false);
      const message = emailMessage();
      provider.mode = 'hold';

      const a = track(send(message));
      assert.ok(
        await eventually(() => provider.requests.length === 1),
        "A's in-progress claim is committed and its email is at the provider",
      );
      const b = await send(message);
      assert.equal(a.done, false, 'B answered while A was still at the provider');
      assert.equal(b.statusCode, 409, b.body);
      assert.equal(json<Problem>(b).type, '/problems/in-flight');
      assert.ok(Number(b.headers['retry-after']) >= 1 && Number(b.headers['retry-after']) <= LEASE_MS / 1000);
      assert.equal(provider.requests.length, 1, 'B did not call the provider');

      provider.releaseHeld();
      const first = await a.value;
      assert.equal(first.statusCode, 201, first.body);
      const retry = await send(message);
      assert.equal(retry.statusCode, 200);
      assert.deepEqual(json<CommandAnswer>(retry).outcome, json<CommandAnswer>(first).outcome);
      assert.equal(provider.delivered.length, 1);
    });

    test('two copies taking over one expired attempt at once: one resends, the other is told in-flight; one email delivered', async () => {
      let crash = true;
      const { provider, send, advance } = await setup(true, { crashAfterSend: () => crash });
      const message = emailMessage();
      assert.equal((await send(message)).statusCode, 500, 'sent, then crashed before recording it');
      crash = false;
      advance(LEASE_MS + 1000);
      provider.mode = 'hold';

      const copies = [track(send(message)), track(send(message))];
      assert.ok(await eventually(() => copies.some((c) => c.done)), 'one copy answered');
      assert.ok(await eventually(() => provider.requests.length === 2), 'the take-over reached the provider');
      const loser = copies.find((c) => c.done)!;
      const winner = copies.find((c) => c !== loser)!;
      assert.equal(winner.done, false, 'the winner is still at the provider');
      const lost = await loser.value;
      assert.equal(lost.statusCode, 409, lost.body);
      assert.equal(json<Problem>(lost).type, '/problems/in-flight', 'the winner renewed the lease');
      assert.equal(provider.requests.length, 2, 'one take-over called the provider, not two');

      provider.releaseHeld();
      const won = await winner.value;
      assert.equal(won.statusCode, 201, won.body);
      assert.equal(json<CommandAnswer>(won).outcome.reconciled, 'automatic');
      assert.equal(json<CommandAnswer>(won).outcome.attempts, 2);
      const [row] = await inboxRows(database.db, message.messageId);
      assert.equal(row!.attempts, 2);
      assert.notEqual(row!.completed_at, null);
      assert.equal(provider.delivered.length, 1);
    });
    test('a stale attempt refused after a take-over leaves the new attempt in place: 409 in-flight, the next copy sends nothing', async () => {
      const { provider, send } = await setup(true);
      const message = emailMessage();
      provider.mode = 'hold';
      const a = track(send(message));
      assert.ok(await eventually(() => provider.requests.length === 1), "A's email is at the provider");
      await expireLease(message);
      const b = track(send(message));
      assert.ok(await eventually(() => provider.requests.length === 2), 'B took the expired record over and is at the provider');
      provider.mode = 'accept';

      provider.answerOldestHeld(422);
      const stale = await a.value;
      assert.equal(stale.statusCode, 409, stale.body);
      assert.equal(json<Problem>(stale).type, '/problems/in-flight', 'A answers with the record as B holds it');
      const [row] = await inboxRows(database.db, message.messageId);
      assert.equal(row?.attempts, 2, "B's record was not released by A");
      assert.equal(row?.completed_at, null);

      const c = await send(message);
      assert.equal(c.statusCode, 409, c.body);
      assert.equal(provider.requests.length, 2, 'no copy sends while B is at the provider');

      provider.releaseHeld();
      const won = await b.value;
      assert.equal(won.statusCode, 201, won.body);
      assert.equal(json<CommandAnswer>(won).outcome.attempts, 2);
      const [done] = await inboxRows(database.db, message.messageId);
      assert.notEqual(done?.completed_at, null);
      assert.equal(provider.requests.length, 2);
      assert.equal(provider.delivered.length, 1);
    });

    test('a stale attempt that sent after a take-over completed: 200 with the recorded outcome, not 201 with its own', async () => {
      const { provider, send } = await setup(true);
      const message = emailMessage();
      provider.mode = 'hold';
      const a = track(send(message));
      assert.ok(await eventually(() => provider.requests.length === 1));
      await expireLease(message);
      provider.mode = 'accept';
      const b = await send(message);
      assert.equal(b.statusCode, 201, b.body);
      assert.equal(json<CommandAnswer>(b).outcome.attempts, 2);

      provider.releaseHeld();
      const stale = await a.value;
      assert.equal(stale.statusCode, 200, stale.body);
      assert.deepEqual(json<CommandAnswer>(stale).outcome, json<CommandAnswer>(b).outcome);
      const [row] = await inboxRows(database.db, message.messageId);
      assert.equal(row?.attempts, 2);
      assert.equal(provider.delivered.length, 1);
    });

    test('reconcile while the attempt is inside its lease: 409 lease-not-expired with leaseUntil and Retry-After; nothing changed, one email', async () => {
      const { provider, send, reconcile } = await setup(false);
      const message = emailMessage();
      provider.mode = 'hold';
      const a = track(send(message));
      assert.ok(await eventually(() => provider.requests.length === 1));
      provider.mode = 'accept';

      for (const resolution of ['release', 'completed'] as const) {
        const refused = await reconcile(message, resolution);
        assert.equal(refused.statusCode, 409, refused.body);
        const problem = json<Problem & { leaseUntil: string }>(refused);
        assert.equal(problem.type, '/problems/lease-not-expired');
        const [row] = await inboxRows(database.db, message.messageId);
        assert.equal(problem.leaseUntil, row!.lease_until!.toISOString());
        assert.ok(Number(refused.headers['retry-after']) >= 1 && Number(refused.headers['retry-after']) <= LEASE_MS / 1000);
        assert.equal(row?.completed_at, null);
      }
      const copy = await send(message);
      assert.equal(copy.statusCode, 409, copy.body);
      assert.equal(json<Problem>(copy).type, '/problems/in-flight');

      provider.releaseHeld();
      assert.equal((await a.value).statusCode, 201);
      assert.equal(provider.requests.length, 1);
    });

    test('released by an operator after the lease, then the attempt sends: its outcome is recorded, the next copy sends nothing', async () => {
      const { provider, send, reconcile } = await setup(false);
      const message = emailMessage();
      provider.mode = 'hold';
      const a = track(send(message));
      assert.ok(await eventually(() => provider.requests.length === 1));
      await expireLease(message);
      const released = await reconcile(message, 'release');
      assert.equal(released.statusCode, 200, released.body);

      provider.releaseHeld();
      const stale = await a.value;
      assert.equal(stale.statusCode, 201, stale.body);
      const [row] = await inboxRows(database.db, message.messageId);
      assert.notEqual(row?.completed_at, null, 'the email went out, so it is recorded');
      const next = await send(message);
      assert.equal(next.statusCode, 200, next.body);
      assert.equal(provider.requests.length, 1);
    });

    test("completed by an operator after the lease, then the attempt sends: 200 with the operator's outcome", async () => {
      const { provider, send, reconcile } = await setup(false);
      const message = emailMessage();
      provider.mode = 'hold';
      const a = track(send(message));
      assert.ok(await eventually(() => provider.requests.length === 1));
      await expireLease(message);
      const settled = await reconcile(message, 'completed');
      assert.equal(settled.statusCode, 200, settled.body);
      assert.equal(json<{ record: InboxRecord }>(settled).record.state, 'completed');

      provider.releaseHeld();
      const stale = await a.value;
      assert.equal(stale.statusCode, 200, stale.body);
      assert.equal(json<CommandAnswer>(stale).outcome.result, 'reconciled');
      assert.equal(provider.requests.length, 1);
    });

    test('two-phase commands past INBOX_QUEUE_LIMIT in flight: 503 overloaded with Retry-After, nothing recorded, the provider not called', async () => {
      const { provider, send } = await setup(false, { queueLimit: 1 });
      const first = emailMessage();
      provider.mode = 'hold';
      const a = track(send(first));
      assert.ok(await eventually(() => provider.requests.length === 1));

      const second = emailMessage();
      const refused = await send(second);
      assert.equal(refused.statusCode, 503, refused.body);
      assert.equal(json<Problem>(refused).type, '/problems/overloaded');
      assert.ok(Number(refused.headers['retry-after']) >= 1);
      assert.equal((await inboxRows(database.db, second.messageId)).length, 0);
      assert.equal(provider.requests.length, 1);

      provider.releaseHeld();
      assert.equal((await a.value).statusCode, 201);
      const later = await send(second);
      assert.equal(later.statusCode, 201, 'the bound counts commands in flight, not ever sent');
      assert.equal(provider.requests.length, 2);
    });
  });
}
