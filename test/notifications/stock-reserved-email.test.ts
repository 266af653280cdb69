import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import type { BuildAppOptions } from '../../src/app.js';
import { reportMissingDatabases, type TestDatabaseHandle, testDatabases } from '../support/databases.js';
import { FakeEmailProvider } from '../support/fake-email-provider.js';
import {
  admin,
  inboxRows,
  json,
  newId,
  orderPlaced,
  placeOrder,
  seedBook,
  tableCounts,
  testApp,
  type Problem,
  type CommandAnswer,
  type InboxRecord,
  type Page,
} from '../support/fixtures.js';

const CONSUMER = 'notifications.stock-reserved-email';
const LEASE_MS = 30_000;

function emailMessage(messageId = `msg-${newId()}`) {
  return { messageId, data: { orderId: newId(), bookId: newId(), quantity: 2, email: 'ada@example.org' } };
}

/** A clock the test moves: leases expire without waiting. */
class TestClock {
  private offsetMs = 0;
  readonly now = () => new Date(Date.now() + this.offsetMs);
  advance(ms: number) {
    this.offsetMs += ms;
  }
}

reportMissingDatabases((name) => `stock-reserved email, two-phase, on ${name}`);
for (const target of testDatabases) {
  describe(`stock-reserved email, two-phase, on ${target.name}`, () => {
    let database: TestDatabaseHandle;
    const apps: FastifyInstance[] = [];
    const providers: FakeEmailProvider[] = [];
    let crashAfterSend = false;

    before(async () => {
      database = await target.open();
    });
    after(async () => {
      await Promise.all(apps.map((a) => a.close()));
      await Promise.all(providers.map((p) => p.stop()));
      await database?.close();
    });

    async function setup(options: { deduplicates?: boolean; timeoutMs?: number; url?: string } = {}) {
      const provider = new FakeEmailProvider(options.deduplicates ?? false);
      providers.push(provider);
      const url = options.url ?? (await provider.start());
      const clock = new TestClock();
      const appOptions: Omit<BuildAppOptions, 'database'> = {
        now: clock.now,
        config: {
          emailProvider: 'http',
          emailProviderUrl: url,
          emailProviderIdempotent: options.deduplicates ?? false,
          emailProviderTimeoutMs: options.timeoutMs ?? 5000,
          inboxLeaseMs: LEASE_MS,
        },
        testHooks: {
          afterSideEffect: async () => {
            if (crashAfterSend) throw new Error('injected crash after the email was sent');
          },
        },
      };
      const app = await testApp(database, appOptions);
      apps.push(app);
      const send = (message: unknown) =>
        app.inject({ method: 'POST', url: '/notifications/stock-reserved-email', payload: message as object });
      return { app, provider, clock, send };
    }

    async function crashAfterSending(send: (m: unknown) => Promise<{ statusCode: number }>, message: unknown) {
      crashAfterSend = true;
      try {
        return await send(message);
      } finally {
        crashAfterSend = false;
      }
    }

    test('the email is sent once with the downstream key; a duplicate replays it without sending', async () => {
      const { provider, send } = await setup();
      const message = emailMessage();
      const first = await send(message);
      const second = await send(message);
      assert.equal(first.statusCode, 201, first.body);
      assert.equal(json<CommandAnswer>(first).outcome.result, 'sent');
      assert.equal(json<CommandAnswer>(first).outcome.downstreamKey, `${CONSUMER}:${message.messageId}`);
      assert.equal(second.statusCode, 200);
      assert.equal(second.headers['idempotent-replayed'], 'true');
      assert.equal(provider.requests.length, 1);
      assert.equal(provider.requests[0]!.idempotencyKey, `${CONSUMER}:${message.messageId}`);
      assert.equal(provider.requests[0]!.body.to, 'ada@example.org');
    });

    test('the article: sent, crashed before phase 2; redelivered within the lease: 409 in-flight; after it: 409 needs-reconciliation; one email', async () => {
      const { provider, clock, send } = await setup();
      const message = emailMessage();

      const crashed = await crashAfterSending(send, message);
      assert.equal(crashed.statusCode, 500);
      const rows = await inboxRows(database.db, message.messageId);
      assert.equal(rows.length, 1);
      assert.equal(rows[0]!.completed_at, null, 'the record stays in progress');

      const early = await send(message);
      assert.equal(early.statusCode, 409);
      assert.equal(json<Problem>(early).type, '/problems/in-flight');
      assert.ok(Number(early.headers['retry-after']) >= 1 && Number(early.headers['retry-after']) <= LEASE_MS / 1000);

      clock.advance(LEASE_MS + 1000);
      const late = await send(message);
      assert.equal(late.statusCode, 409);
      const problem = json<Problem>(late);
      assert.equal(problem.type, '/problems/needs-reconciliation');
      assert.equal(problem.reconcile, `/inbox/${encodeURIComponent(CONSUMER)}/${encodeURIComponent(message.messageId)}/reconcile`);
      assert.equal(provider.requests.length, 1, 'never a blind resend');
    });

    test('with a provider that deduplicates: the same crash, after the lease: 201 reconciled automatically, one email delivered', async () => {
      const { provider, clock, send } = await setup({ deduplicates: true });
      const message = emailMessage();
      assert.equal((await crashAfterSending(send, message)).statusCode, 500);

      clock.advance(LEASE_MS + 1000);
      const resent = await send(message);
      assert.equal(resent.statusCode, 201, resent.body);
      assert.equal(json<CommandAnswer>(resent).outcome.reconciled, 'automatic');
      assert.equal(json<CommandAnswer>(resent).outcome.attempts, 2);
      assert.equal(provider.requests.length, 2);
      assert.deepEqual(
        provider.requests.map((r) => r.idempotencyKey),
        [`${CONSUMER}:${message.messageId}`, `${CONSUMER}:${message.messageId}`],
      );
      assert.equal(provider.delivered.length, 1, 'the provider delivered one email');
      const replay = await send(message);
      assert.equal(replay.statusCode, 200);
      assert.equal(provider.requests.length, 2);
    });

    test('reconcile completed: the next copy gets 200 and nothing is sent', async () => {
      const { app, provider, clock, send } = await setup();
      const message = emailMessage();
      await crashAfterSending(send, message);
      clock.advance(LEASE_MS + 1000);
      const reconcileUrl = json<Problem>(await send(message)).reconcile;

      const settled = await app.inject({
        method: 'POST',
        url: reconcileUrl,
        headers: admin,
        payload: { resolution: 'completed', note: 'provider dashboard shows it delivered' },
      });
      assert.equal(settled.statusCode, 200, settled.body);
      assert.equal(json<{ record: InboxRecord }>(settled).record.state, 'completed');
      const next = await send(message);
      assert.equal(next.statusCode, 200);
      assert.equal(json<CommandAnswer>(next).outcome.result, 'reconciled');
      assert.equal(json<CommandAnswer>(next).outcome.note, 'provider dashboard shows it delivered');
      assert.equal(provider.requests.length, 1);

      const again = await app.inject({ method: 'POST', url: reconcileUrl, headers: admin, payload: { resolution: 'release' } });
      assert.equal(again.statusCode, 409);
      assert.equal(json<Problem>(again).type, '/problems/not-in-progress');
    });

    test('reconcile release: the next copy gets 201 and one new email', async () => {
      const { app, provider, clock, send } = await setup();
      const message = emailMessage();
      await crashAfterSending(send, message);
      clock.advance(LEASE_MS + 1000);

      const released = await app.inject({
        method: 'POST',
        url: `/inbox/${CONSUMER}/${encodeURIComponent(message.messageId)}/reconcile`,
        headers: admin,
        payload: { resolution: 'release', note: 'bounced; send again' },
      });
      assert.equal(released.statusCode, 200, released.body);
      assert.equal(json<{ record: InboxRecord | null }>(released).record, null);
      assert.equal((await inboxRows(database.db, message.messageId)).length, 0);
      const next = await send(message);
      assert.equal(next.statusCode, 201);
      assert.equal(provider.requests.length, 2);
    });

    test('the provider refuses with a 4xx (400, 422): 502 email-provider-failed, the claim is released, the next copy sends', async () => {
      const { provider, send } = await setup();
      for (const status of [400, 422]) {
        const message = emailMessage();
        provider.mode = 'refuse';
        provider.status = status;
        const refused = await send(message);
        assert.equal(refused.statusCode, 502, `${status}: ${refused.body}`);
        assert.equal(json<Problem>(refused).type, '/problems/email-provider-failed');
        assert.equal((await inboxRows(database.db, message.messageId)).length, 0, 'nothing was sent, so nothing is claimed');

        provider.mode = 'accept';
        const retry = await send(message);
        assert.equal(retry.statusCode, 201, `${status}: ${retry.body}`);
      }
      assert.equal(provider.requests.length, 4);
      assert.equal(provider.delivered.length, 2, 'one email per message');
    });

    test('a 5xx, 408, 409, 425 or 429 after the provider acted: the outcome is unknown, the next copy is told needs-reconciliation; one request', async () => {
      const { provider, send } = await setup({ deduplicates: false });
      for (const status of [502, 503, 500, 408, 409, 425, 429]) {
        const message = emailMessage();
        provider.mode = 'fail-after-delivery';
        provider.status = status;
        const failed = await send(message);
        assert.equal(failed.statusCode, 502, `${status}: ${failed.body}`);
        assert.equal(json<Problem>(failed).type, '/problems/email-provider-error');
        const [row] = await inboxRows(database.db, message.messageId);
        assert.equal(row?.completed_at, null, `${status}: the record stays in progress`);

        provider.mode = 'accept';
        const next = await send(message);
        assert.equal(next.statusCode, 409, `${status}: ${next.body}`);
        assert.equal(json<Problem>(next).type, '/problems/needs-reconciliation');
        assert.equal(
          provider.requests.filter((r) => r.idempotencyKey === `${CONSUMER}:${message.messageId}`).length,
          1,
          `${status}: never a blind resend`,
        );
      }
      assert.equal(provider.delivered.length, 7);
    });

    test('a 502 after the provider acted, with a provider that deduplicates: the next copy resends under the same key, one email delivered', async () => {
      const { provider, send } = await setup({ deduplicates: true });
      const message = emailMessage();
      provider.mode = 'fail-after-delivery';
      provider.status = 502;
      const failed = await send(message);
      assert.equal(failed.statusCode, 502, failed.body);
      assert.equal(json<Problem>(failed).type, '/problems/email-provider-error');

      provider.mode = 'accept';
      const resent = await send(message);
      assert.equal(resent.statusCode, 201, resent.body);
      assert.equal(json<CommandAnswer>(resent).outcome.reconciled, 'automatic');
      assert.equal(json<CommandAnswer>(resent).outcome.attempts, 2);
      assert.deepEqual(
        provider.requests.map((r) => r.idempotencyKey),
        [`${CONSUMER}:${message.messageId}`, `${CONSUMER}:${message.messageId}`],
      );
      assert.equal(provider.delivered.length, 1);
    });

    test('the provider resets the connection after reading the request: 504, the next copy is told needs-reconciliation; one request', async () => {
      const { provider, send } = await setup();
      const message = emailMessage();
      provider.mode = 'reset';
      const reset = await send(message);
      assert.equal(reset.statusCode, 504, reset.body);
      assert.equal(json<Problem>(reset).type, '/problems/email-provider-timeout');

      provider.mode = 'accept';
      const next = await send(message);
      assert.equal(next.statusCode, 409, next.body);
      assert.equal(json<Problem>(next).type, '/problems/needs-reconciliation');
      assert.equal(provider.requests.length, 1);
    });

    test('the provider cannot be reached: 503, nothing claimed', async () => {
      const closed = new FakeEmailProvider(false);
      const url = await closed.start();
      await closed.stop();
      const { send } = await setup({ url });
      const message = emailMessage();
      const res = await send(message);
      assert.equal(res.statusCode, 503);
      assert.equal(json<Problem>(res).type, '/problems/email-provider-unavailable');
      assert.equal((await inboxRows(database.db, message.messageId)).length, 0);
    });

    test('the provider hangs past the timeout: 504, the record stays in progress', async () => {
      const { provider, send } = await setup({ timeoutMs: 300 });
      provider.mode = 'hang';
      const message = emailMessage();
      const res = await send(message);
      assert.equal(res.statusCode, 504);
      assert.equal(json<Problem>(res).type, '/problems/email-provider-timeout');
      const rows = await inboxRows(database.db, message.messageId);
      assert.equal(rows.length, 1);
      assert.equal(rows[0]!.completed_at, null);
      const again = await send(message);
      assert.equal(again.statusCode, 409, 'the attempt is over and its outcome unknown');
      assert.equal(json<Problem>(again).type, '/problems/needs-reconciliation');
      assert.equal(provider.requests.length, 1);
    });

    test('the inbox API: a record by key, in-progress listing, 404 for unknown keys, admin token required', async () => {
      const { app, send } = await setup({ timeoutMs: 200 });
      const message = emailMessage(`inbox/api|${newId()}`);
      providers.at(-1)!.mode = 'hang';
      await send(message);

      const url = `/inbox/${CONSUMER}/${encodeURIComponent(message.messageId)}`;
      const record = await app.inject({ url, headers: admin });
      assert.equal(record.statusCode, 200, record.body);
      assert.equal(json<InboxRecord>(record).state, 'in-progress');
      assert.equal(json<InboxRecord>(record).messageId, message.messageId);
      assert.equal(json<InboxRecord>(record).keySource, 'body');
      assert.equal(json<InboxRecord>(record).attempts, 1);
      assert.match(json<InboxRecord>(record).fingerprint, /^[0-9a-f]{64}$/);

      const list = await app.inject({ url: `/inbox?consumer=${CONSUMER}&state=in-progress&limit=500`, headers: admin });
      assert.equal(list.statusCode, 200);
      assert.ok(json<Page<InboxRecord>>(list).items.some((r) => r.messageId === message.messageId));
      assert.ok(json<Page<InboxRecord>>(list).items.every((r) => r.state === 'in-progress'));

      assert.equal((await app.inject({ url })).statusCode, 401);
      assert.equal((await app.inject({ url, headers: { authorization: 'Bearer wrong-token-wrong-token' } })).statusCode, 401);
      assert.equal((await app.inject({ url: `/inbox/${CONSUMER}/nope`, headers: admin })).statusCode, 404);
      const unknown = await app.inject({
        method: 'POST',
        url: `/inbox/${CONSUMER}/nope/reconcile`,
        headers: admin,
        payload: { resolution: 'completed' },
      });
      assert.equal(unknown.statusCode, 404);
    });

    test('paging through the inbox visits every record once', async () => {
      const { app } = await setup();
      const page1 = await app.inject({ url: '/inbox?limit=2', headers: admin });
      const all = await app.inject({ url: '/inbox?limit=500', headers: admin });
      const seen: string[] = json<Page<InboxRecord>>(page1).items.map((r) => `${r.consumer}/${r.messageId}`);
      let cursor = json<Page<InboxRecord>>(page1).nextAfter;
      for (let i = 0; cursor !== null && i < 100; i++) {
        const page = await app.inject({ url: `/inbox?limit=2&after=${cursor}`, headers: admin });
        seen.push(...json<Page<InboxRecord>>(page).items.map((r) => `${r.consumer}/${r.messageId}`));
        cursor = json<Page<InboxRecord>>(page).nextAfter;
      }
      assert.deepEqual(
        seen,
        json<Page<InboxRecord>>(all).items.map((r) => `${r.consumer}/${r.messageId}`),
      );
      assert.ok(seen.length >= 3);
      const bad = await app.inject({ url: '/inbox?after=garbage', headers: admin });
      assert.equal(bad.statusCode, 400);
    });

    test('without ADMIN_TOKEN, admin routes answer loopback clients only', async () => {
      const app = await testApp(database, { config: { adminToken: undefined } });
      apps.push(app);
      assert.equal((await app.inject({ url: '/inbox?limit=1', remoteAddress: '127.0.0.1' })).statusCode, 200);
      const remote = await app.inject({ url: '/inbox?limit=1', remoteAddress: '10.1.2.3' });
      assert.equal(remote.statusCode, 403);
      assert.equal(json<Problem>(remote).type, '/problems/forbidden');
    });

    test('one messageId to the reserve-stock and the email consumers: both processed', async () => {
      const { app, provider, send } = await setup();
      const book = await seedBook(app, 5);
      const placed = orderPlaced(book, 1);
      const reserve = await placeOrder(app, placed);
      const email = await send({ messageId: placed.messageId, data: { ...placed.data, email: 'ada@example.org' } });
      assert.equal(reserve.statusCode, 201);
      assert.equal(email.statusCode, 201);
      assert.equal(provider.requests.length, 1);
      assert.deepEqual(
        (await inboxRows(database.db, placed.messageId)).map((r) => r.consumer),
        ['inventory.reserve-stock', CONSUMER],
      );
    });

    test('bad email input: 400, nothing recorded or sent', async () => {
      const { provider, send } = await setup();
      const before = await tableCounts(database.db);
      const res = await send({ messageId: `m-${newId()}`, data: { ...emailMessage().data, email: 'not-an-address' } });
      assert.equal(res.statusCode, 400);
      assert.deepEqual(await tableCounts(database.db), before);
      assert.equal(provider.requests.length, 0);
    });
  });
}
