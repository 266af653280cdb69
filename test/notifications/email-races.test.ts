import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { reportMissingDatabases, type TestDatabaseHandle, testDatabases } from '../support/databases.js';
import { FakeEmailProvider } from '../support/fake-email-provider.js';
import { inboxRows, json, newId, testApp, type Problem, type CommandAnswer } from '../support/fixtures.js';
import { eventually } from '../support/observe.js';

const LEASE_MS = 30_000;

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

    async function setup(deduplicates: boolean, options: { crashAfterSend?: () => boolean } = {}) {
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
      return { provider, send, advance: (ms: number) => (offsetMs += ms) };
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
  });
}
