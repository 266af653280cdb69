import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { insertDeadLetter } from '../../src/inbox/dead-letter.repository.js';
import { reportMissingDatabases, type TestDatabaseHandle, testDatabases } from '../support/databases.js';
import { FakeEmailProvider } from '../support/fake-email-provider.js';
import { admin, inboxRows, json, newId, orderPlaced, placeOrder, seedBook, stockRow, testApp, type Problem } from '../support/fixtures.js';

/**
 * The admin routes behind the operator console, as a script calls them: status, body, and the rows
 * they leave. Dead letters from the command queues are written with the service's own writer, shaped
 * as the AMQP consumer writes them (the envelope as received, the key it carried); key reuse comes from
 * a real 422.
 */

const RESERVE = 'inventory.reserve-stock';
const EMAIL = 'notifications.stock-reserved-email';
const LEASE_MS = 30_000;

interface Overview {
  attention: { needed: boolean; summary: string; items: { kind: string; count: number }[] };
  activity: { points: { commands: Record<string, number>; batches: number }[] };
  outbox: { pending: number; oldestPendingAgeSeconds: number | null; relayConfigured: boolean };
  deadLetters: { total: number; byReason: { reason: string; count: number }[] };
  needsReconciliation: number;
}
interface Group {
  consumer: string;
  reason: string;
  count: number;
  lastId: string;
  replayable: boolean;
  notReplayableBecause: string | null;
}
interface Replay {
  result: string;
  outcome?: { result: string };
  reason?: string;
  detail?: string;
  deadLetter?: string;
}
interface Progress {
  done: number;
  remaining: number;
  items: { id: string; result: string; reason?: string }[];
}

class TestClock {
  private offsetMs = 0;
  readonly now = () => new Date(Date.now() + this.offsetMs);
  advance(ms: number) {
    this.offsetMs += ms;
  }
}

reportMissingDatabases((name) => `console admin routes on ${name}`);
for (const target of testDatabases) {
  describe(`console admin routes on ${target.name}`, () => {
    let database: TestDatabaseHandle;
    let app: FastifyInstance;
    let provider: FakeEmailProvider;
    const clock = new TestClock();
    let failCommands = false;
    let crashAfterSend = false;

    before(async () => {
      database = await target.open();
      provider = new FakeEmailProvider(false);
      const url = await provider.start();
      app = await testApp(database, {
        now: clock.now,
        config: { emailProvider: 'http', emailProviderUrl: url, emailProviderIdempotent: false, inboxLeaseMs: LEASE_MS },
        testHooks: {
          beforeCommit: async () => {
            if (failCommands) throw new Error('stock service bug: cannot reserve');
          },
          afterSideEffect: async () => {
            if (crashAfterSend) throw new Error('injected crash after the email was sent');
          },
        },
      });
    });
    after(async () => {
      await app?.close();
      await provider?.stop();
      await database?.close();
    });

    const get = (url: string) => app.inject({ method: 'GET', url, headers: admin });
    const post = (url: string, payload?: object) => app.inject({ method: 'POST', url, headers: admin, ...(payload && { payload }) });

    /** A poison message from the order-placed queue, as the AMQP consumer records it. */
    async function queueLetter(reason: string, envelope: unknown, messageId: string, detail = 'failed on 5 deliveries') {
      return insertDeadLetter(app.db, {
        consumer: RESERVE,
        messageId,
        keySource: 'body',
        payload: envelope,
        storedFingerprint: '',
        receivedFingerprint: 'f'.repeat(64),
        reason,
        receivedAt: clock.now(),
        detail,
      });
    }

    async function deadLetterIds(): Promise<string[]> {
      const rows = await app.db.selectFrom('dead_letters').select('id').orderBy('id').execute();
      return rows.map((r) => String(r.id));
    }

    async function clearDeadLetters() {
      await app.db.deleteFrom('dead_letters').execute();
    }

    test('every new admin route wants the bearer token', async () => {
      for (const [method, url] of [
        ['GET', '/overview'],
        ['GET', '/inbox/needs-reconciliation'],
        ['GET', `/inbox/${RESERVE}/k1/events`],
        ['GET', '/outbox/books'],
        ['GET', '/outbox/relay'],
        ['GET', '/dead-letters/groups'],
        ['GET', '/dead-letters/search?messageId=k1'],
        ['GET', `/dead-letters/groups/letters?consumer=${RESERVE}&reason=x`],
        ['POST', '/dead-letters/1/replay'],
        ['DELETE', '/dead-letters/1'],
      ] as const) {
        const res = await app.inject({ method, url });
        assert.equal(res.statusCode, 401, `${method} ${url}: ${res.body}`);
        assert.equal(json<Problem>(res).type, '/problems/unauthorized');
      }
      const group = await app.inject({
        method: 'POST',
        url: '/dead-letters/groups/discard',
        payload: { consumer: RESERVE, reason: 'x', throughId: '1' },
      });
      assert.equal(group.statusCode, 401);
    });

    test('the overview: calm on a fresh service; commands counted by outcome; a 422 makes a dead letter that needs a person', async () => {
      const calm = await get('/overview');
      assert.equal(calm.statusCode, 200, calm.body);
      assert.equal(json<Overview>(calm).attention.needed, false);
      assert.equal(json<Overview>(calm).attention.summary, 'Nothing needs a person.');
      assert.equal(json<Overview>(calm).outbox.relayConfigured, false);

      const bookId = await seedBook(app, 10);
      const message = orderPlaced(bookId, 2);
      assert.equal((await placeOrder(app, message)).statusCode, 201);
      assert.equal((await placeOrder(app, message)).statusCode, 200);
      const reused = await placeOrder(app, { ...message, data: { ...message.data, quantity: 3 } });
      assert.equal(reused.statusCode, 422);

      const busy = json<Overview>(await get('/overview'));
      const counted = { processed: 0, duplicate: 0, refused: 0 };
      for (const point of busy.activity.points) {
        counted.processed += point.commands.processed ?? 0;
        counted.duplicate += point.commands.duplicate ?? 0;
        counted.refused += point.commands.refused ?? 0;
      }
      assert.deepEqual(counted, { processed: 1, duplicate: 1, refused: 1 });
      assert.equal(busy.outbox.pending, 1, 'the reservation wrote one event');
      assert.ok(busy.outbox.oldestPendingAgeSeconds !== null);
      assert.equal(busy.deadLetters.total, 1);
      assert.deepEqual(busy.deadLetters.byReason, [{ reason: 'fingerprint-mismatch', count: 1 }]);
      assert.equal(busy.attention.needed, true);
      assert.deepEqual(
        busy.attention.items.map((i) => [i.kind, i.count]),
        [['dead-letters', 1]],
      );
      assert.match(busy.attention.summary, /^Needs a person: 1 dead letter\.$/);
      await clearDeadLetters();
    });

    test('a stuck email is listed past its lease with what the service knows, and leaves the list once settled', async () => {
      const messageId = `email-${newId()}`;
      const email = { messageId, data: { orderId: newId(), bookId: newId(), quantity: 1, email: 'ada@example.org' } };
      crashAfterSend = true;
      const crashed = await app.inject({ method: 'POST', url: '/notifications/stock-reserved-email', payload: email });
      crashAfterSend = false;
      assert.equal(crashed.statusCode, 500);

      const inLease = json<{ items: { messageId: string }[] }>(await get('/inbox/needs-reconciliation'));
      assert.deepEqual(
        inLease.items.filter((i) => i.messageId === messageId),
        [],
        'inside its lease the attempt may still be running',
      );

      clock.advance(LEASE_MS + 1000);
      const listed = await get('/inbox/needs-reconciliation');
      assert.equal(listed.statusCode, 200, listed.body);
      const item = json<{ items: Record<string, unknown>[] }>(listed).items.find((i) => i.messageId === messageId);
      assert.ok(item, listed.body);
      assert.equal(item.consumer, EMAIL);
      assert.equal(item.attempts, 1);
      assert.equal(item.downstreamKey, `${EMAIL}:${messageId}`);
      assert.equal(typeof item.leaseUntil, 'string');
      assert.deepEqual(item.links, { self: `/inbox/${EMAIL}/${messageId}`, reconcile: `/inbox/${EMAIL}/${messageId}/reconcile` });
      const overview = json<Overview>(await get('/overview'));
      assert.equal(overview.needsReconciliation, 1);
      assert.equal(overview.attention.items[0]?.kind, 'needs-reconciliation');

      const settled = await post(`/inbox/${EMAIL}/${messageId}/reconcile`, { resolution: 'completed', note: 'provider log shows it' });
      assert.equal(settled.statusCode, 200, settled.body);
      const again = await post(`/inbox/${EMAIL}/${messageId}/reconcile`, { resolution: 'completed' });
      assert.equal(again.statusCode, 409, 'a second settlement changes nothing');
      assert.equal(json<Problem>(again).type, '/problems/not-in-progress');
      const after = json<{ items: { messageId: string }[] }>(await get('/inbox/needs-reconciliation'));
      assert.deepEqual(
        after.items.filter((i) => i.messageId === messageId),
        [],
      );
      const rows = await inboxRows(app.db, messageId);
      assert.notEqual(rows[0]!.completed_at, null);
      assert.equal(provider.requests.length, 1, 'one email, never resent');
    });

    test('replay: poison whose cause was fixed runs under its key; while the cause remains it is dead-lettered again and says so', async () => {
      const bookId = await seedBook(app, 5);
      const messageId = `poison-${newId()}`;
      const envelope = { messageId, data: { orderId: newId(), bookId, quantity: 2 } };
      const id = await queueLetter('delivery-limit', envelope, messageId);

      failCommands = true;
      const failed = await post(`/dead-letters/${id}/replay`);
      failCommands = false;
      assert.equal(failed.statusCode, 200, failed.body);
      const again = json<Replay>(failed);
      assert.equal(again.result, 'dead-lettered');
      assert.equal(again.reason, 'replay-failed');
      assert.match(again.detail!, /failed again: stock service bug: cannot reserve/);
      assert.deepEqual(await deadLetterIds(), [again.deadLetter], 'the old letter is replaced by the new one');
      assert.equal((await stockRow(app.db, bookId))?.reserved, 0);
      assert.deepEqual(await inboxRows(app.db, messageId), [], 'nothing recorded for the key');

      const fixed = await post(`/dead-letters/${again.deadLetter}/replay`);
      assert.equal(fixed.statusCode, 200, fixed.body);
      assert.equal(json<Replay>(fixed).result, 'processed');
      assert.equal(json<Replay>(fixed).outcome?.result, 'reserved');
      assert.deepEqual(await deadLetterIds(), []);
      assert.equal((await stockRow(app.db, bookId))?.reserved, 2);
      const rows = await inboxRows(app.db, messageId);
      assert.equal(rows.length, 1);
      assert.equal(rows[0]!.consumer, RESERVE);
      assert.notEqual(rows[0]!.completed_at, null);

      const gone = await post(`/dead-letters/${again.deadLetter}/replay`);
      assert.equal(gone.statusCode, 404, 'replayed already');

      // The same message dead-lettered twice (two copies): the second replay is a duplicate, applied once.
      const copy = await queueLetter('delivery-limit', envelope, messageId);
      const duplicate = await post(`/dead-letters/${copy}/replay`);
      assert.equal(json<Replay>(duplicate).result, 'duplicate');
      assert.equal((await stockRow(app.db, bookId))?.reserved, 2);
      assert.deepEqual(await deadLetterIds(), []);
    });

    test('replay of a payload that still breaks the schema is dead-lettered again with the schema error', async () => {
      const messageId = `bad-${newId()}`;
      const id = await queueLetter('invalid-request', { messageId, data: { orderId: newId(), bookId: newId(), quantity: '2' } }, messageId);
      const res = await post(`/dead-letters/${id}/replay`);
      assert.equal(res.statusCode, 200, res.body);
      const body = json<Replay>(res);
      assert.equal(body.result, 'dead-lettered');
      assert.equal(body.reason, 'invalid-request');
      assert.match(body.detail!, /body\/data\/quantity must be integer/);
      const rows = await app.db.selectFrom('dead_letters').selectAll().execute();
      assert.equal(rows.length, 1);
      assert.equal(String(rows[0]!.id), body.deadLetter);
      assert.equal(rows[0]!.reason, 'invalid-request');
      assert.deepEqual(await inboxRows(app.db, messageId), []);
      await clearDeadLetters();
    });

    test('a key-reuse dead letter cannot be replayed, and says why; it can be discarded', async () => {
      const bookId = await seedBook(app, 10);
      const message = orderPlaced(bookId, 1);
      assert.equal((await placeOrder(app, message)).statusCode, 201);
      const reused = await placeOrder(app, { ...message, data: { ...message.data, quantity: 4 } });
      assert.equal(reused.statusCode, 422);
      const id = /\/dead-letters\/(\d+)$/.exec(json<Problem>(reused).deadLetter!)![1]!;

      const found = await get(`/dead-letters/search?messageId=${message.messageId}`);
      assert.equal(found.statusCode, 200, found.body);
      const letters = json<{ items: (Group & { id: string; payload: unknown })[] }>(found).items;
      assert.equal(letters.length, 1);
      assert.equal(letters[0]!.id, id);
      assert.equal(letters[0]!.replayable, false);
      assert.match(letters[0]!.notReplayableBecause!, /processed by inventory\.reserve-stock with another payload first/);
      assert.deepEqual(letters[0]!.payload, { ...message.data, quantity: 4 });

      const refused = await post(`/dead-letters/${id}/replay`);
      assert.equal(refused.statusCode, 409, refused.body);
      assert.equal(json<Problem>(refused).type, '/problems/not-replayable');
      assert.match(json<Problem>(refused).detail!, /a replay would be refused again/);
      assert.deepEqual(await deadLetterIds(), [id], 'the letter stays');
      assert.equal((await stockRow(app.db, bookId))?.reserved, 1);

      const groupReplay = await post('/dead-letters/groups/replay', { consumer: RESERVE, reason: 'fingerprint-mismatch', throughId: id });
      assert.equal(groupReplay.statusCode, 409);
      assert.equal(json<Problem>(groupReplay).type, '/problems/not-replayable');

      const discarded = await app.inject({ method: 'DELETE', url: `/dead-letters/${id}`, headers: admin });
      assert.equal(discarded.statusCode, 200, discarded.body);
      assert.deepEqual(json(discarded), { id, result: 'discarded' });
      assert.deepEqual(await deadLetterIds(), []);
      const twice = await app.inject({ method: 'DELETE', url: `/dead-letters/${id}`, headers: admin });
      assert.equal(twice.statusCode, 404);
    });

    test('groups: listed by consumer and reason; replayed and discarded in bounded batches up to throughId', async () => {
      const bookId = await seedBook(app, 10);
      const poison = [];
      for (let i = 0; i < 3; i++) {
        const messageId = `group-${i}-${newId()}`;
        poison.push(await queueLetter('delivery-limit', { messageId, data: { orderId: newId(), bookId, quantity: 1 } }, messageId));
      }
      for (let i = 0; i < 2; i++) {
        const messageId = `junk-${i}-${newId()}`;
        await queueLetter('invalid-request', { messageId, data: {} }, messageId, 'body/data must have required property orderId');
      }

      const listed = await get('/dead-letters/groups');
      assert.equal(listed.statusCode, 200, listed.body);
      const groups = json<{ items: Group[] }>(listed).items;
      assert.deepEqual(
        groups.map((g) => [g.consumer, g.reason, g.count, g.replayable]),
        [
          [RESERVE, 'delivery-limit', 3, true],
          [RESERVE, 'invalid-request', 2, true],
        ],
      );
      const replayGroup = groups[0]!;
      assert.equal(replayGroup.lastId, poison[2]);

      const letters = await get(`/dead-letters/groups/letters?consumer=${RESERVE}&reason=delivery-limit`);
      assert.deepEqual(
        json<{ items: { id: string }[] }>(letters).items.map((l) => l.id),
        poison,
      );

      const selector = { consumer: RESERVE, reason: 'delivery-limit', throughId: replayGroup.lastId };
      const first = await post('/dead-letters/groups/replay', { ...selector, limit: 2 });
      assert.equal(first.statusCode, 200, first.body);
      assert.deepEqual(
        json<Progress>(first).items.map((i) => [i.id, i.result]),
        [
          [poison[0], 'processed'],
          [poison[1], 'processed'],
        ],
      );
      assert.equal(json<Progress>(first).remaining, 1);
      const second = json<Progress>(await post('/dead-letters/groups/replay', { ...selector, limit: 2 }));
      assert.deepEqual([second.done, second.remaining], [1, 0]);
      assert.equal((await stockRow(app.db, bookId))?.reserved, 3);

      // Discard: a letter recorded after the operator looked (above throughId) is left alone.
      const junk = json<{ items: Group[] }>(await get('/dead-letters/groups')).items.find((g) => g.reason === 'invalid-request')!;
      const late = await queueLetter('invalid-request', { data: {} }, `late-${newId()}`);
      const discarded = await post('/dead-letters/groups/discard', {
        consumer: RESERVE,
        reason: 'invalid-request',
        throughId: junk.lastId,
      });
      assert.equal(discarded.statusCode, 200, discarded.body);
      assert.deepEqual([json<Progress>(discarded).done, json<Progress>(discarded).remaining], [2, 0]);
      assert.deepEqual(await deadLetterIds(), [late]);

      const bad = await post('/dead-letters/groups/discard', { consumer: RESERVE, reason: 'invalid-request', throughId: 'x' });
      assert.equal(bad.statusCode, 400);
      assert.deepEqual(await deadLetterIds(), [late], 'a bad request discards nothing');
      await clearDeadLetters();
    });

    test("one key: its outbox events; the outbox by book: pending, held behind the oldest; this replica's relay", async () => {
      const bookId = await seedBook(app, 10);
      const first = orderPlaced(bookId, 1);
      const second = orderPlaced(bookId, 2);
      assert.equal((await placeOrder(app, first)).statusCode, 201);
      assert.equal((await placeOrder(app, second)).statusCode, 201);

      const events = await get(`/inbox/${RESERVE}/${first.messageId}/events`);
      assert.equal(events.statusCode, 200, events.body);
      const items = json<{ items: { type: string; orderingKey: string; publishedAt: string | null }[] }>(events).items;
      assert.equal(items.length, 1);
      assert.equal(items[0]!.orderingKey, bookId);
      assert.equal(items[0]!.publishedAt, null);
      assert.match(items[0]!.type, /reserved/);
      const none = json<{ items: unknown[] }>(await get(`/inbox/${RESERVE}/no-such-key/events`));
      assert.deepEqual(none.items, []);

      const books = await get('/outbox/books');
      assert.equal(books.statusCode, 200, books.body);
      const book = json<{ items: { bookId: string; pending: number; heldBehind: number; head: { attempts: number } | null }[] }>(
        books,
      ).items.find((b) => b.bookId === bookId);
      assert.ok(book, books.body);
      assert.deepEqual([book.pending, book.heldBehind, book.head?.attempts], [2, 1, 0]);

      const relay = await get('/outbox/relay');
      assert.equal(relay.statusCode, 200, relay.body);
      assert.deepEqual(
        (({ configured, running, connected }) => ({ configured, running, connected }))(json<Record<string, unknown>>(relay)),
        { configured: false, running: false, connected: false },
      );
      assert.match(String(json<{ replica: { id: string } }>(relay).replica.id), /:\d+$/);
    });

    test('bad input to the new routes is a 400 problem, and nothing is changed', async () => {
      const bookId = await seedBook(app, 3);
      const messageId = `kept-${newId()}`;
      const kept = await queueLetter('delivery-limit', { messageId, data: { orderId: newId(), bookId, quantity: 1 } }, messageId);
      const cases: { method: 'GET' | 'POST' | 'DELETE'; url: string; payload?: object }[] = [
        { method: 'GET', url: '/dead-letters/search' },
        { method: 'GET', url: '/dead-letters/search?messageId=%00' },
        // A scoped key (`orders x1`) is a search key; a space that is not after a producer id is not.
        { method: 'GET', url: '/dead-letters/search?messageId=A%20b' },
        { method: 'GET', url: '/dead-letters/search?messageId=a%20%20b' },
        { method: 'GET', url: `/dead-letters/search?messageId=k&consumer=${'x'.repeat(101)}` },
        { method: 'GET', url: '/dead-letters/groups/letters?consumer=inventory.reserve-stock' },
        { method: 'GET', url: '/inbox/needs-reconciliation?limit=0' },
        { method: 'GET', url: '/outbox/books?limit=abc' },
        { method: 'GET', url: `/inbox/${RESERVE}/a%00b/events` },
        { method: 'POST', url: '/dead-letters/abc/replay' },
        { method: 'POST', url: `/dead-letters/${'9'.repeat(19)}/replay` },
        { method: 'DELETE', url: '/dead-letters/-1' },
        { method: 'POST', url: '/dead-letters/groups/replay', payload: { consumer: RESERVE, reason: 'delivery-limit' } },
        {
          method: 'POST',
          url: '/dead-letters/groups/replay',
          payload: { consumer: RESERVE, reason: 'delivery-limit', throughId: kept, limit: 51 },
        },
        { method: 'POST', url: '/dead-letters/groups/discard', payload: { consumer: RESERVE, reason: 'Bad Reason', throughId: kept } },
        {
          method: 'POST',
          url: '/dead-letters/groups/discard',
          payload: { consumer: RESERVE, reason: 'delivery-limit', throughId: kept, extra: 1 },
        },
      ];
      for (const c of cases) {
        const res = await app.inject({ method: c.method, url: c.url, headers: admin, ...(c.payload && { payload: c.payload }) });
        assert.equal(res.statusCode, 400, `${c.method} ${c.url} ${JSON.stringify(c.payload)}: ${res.body}`);
        assert.match(String(res.headers['content-type']), /^application\/problem\+json/);
      }
      assert.deepEqual(await deadLetterIds(), [kept], 'nothing replayed or discarded');
      assert.deepEqual(await inboxRows(app.db, messageId), []);
      await clearDeadLetters();
    });

    test('the console page and its bundle are served from the service itself', async () => {
      const page = await app.inject({ method: 'GET', url: '/console' });
      assert.equal(page.statusCode, 200);
      assert.match(String(page.headers['content-type']), /^text\/html/);
      assert.match(String(page.headers['content-security-policy']), /default-src 'none'; script-src 'self'/);
      assert.match(page.body, /<script type="module" src="console\/assets\/console.js">/);
      assert.doesNotMatch(page.body, /https?:\/\//, 'nothing from another origin');
      const js = await app.inject({ method: 'GET', url: '/console/assets/console.js' });
      assert.equal(js.statusCode, 200);
      assert.match(String(js.headers['content-type']), /^text\/javascript/);
      assert.ok(js.body.length > 10_000, 'the bundle holds preact, htm and uPlot');
      const css = await app.inject({ method: 'GET', url: '/console/assets/console.css' });
      assert.equal(css.statusCode, 200);
      assert.match(css.body, /\.uplot/);
      const other = await app.inject({ method: 'GET', url: '/console/assets/other.js' });
      assert.equal(other.statusCode, 400);
      assert.equal(json<Problem>(other).type, '/problems/invalid-request');
    });
  });
}

describe('console page without ADMIN_TOKEN', () => {
  let database: TestDatabaseHandle;
  let app: FastifyInstance;
  before(async () => {
    database = await testDatabases[0]!.open();
    app = await testApp(database, { config: { adminToken: undefined } });
  });
  after(async () => {
    await app?.close();
    await database?.close();
  });

  test('answers loopback clients only, as the admin routes do', async () => {
    const remote = await app.inject({ method: 'GET', url: '/console', remoteAddress: '10.1.2.3' });
    assert.equal(remote.statusCode, 403);
    assert.equal(json<Problem>(remote).type, '/problems/forbidden');
    const overview = await app.inject({ method: 'GET', url: '/overview', remoteAddress: '10.1.2.3' });
    assert.equal(overview.statusCode, 403);
    const local = await app.inject({ method: 'GET', url: '/console', remoteAddress: '127.0.0.1' });
    assert.equal(local.statusCode, 200);
  });
});
