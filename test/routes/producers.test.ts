import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { Webhook } from 'standardwebhooks';
import type { Db } from '../../src/schema/database.js';
import { apiKeyDigest, type ProducerConfig } from '../../src/producer-config.js';
import { cloudEventKey } from '../../src/inbox/key-sources.js';
import { reportMissingDatabases, type TestDatabaseHandle, testDatabases } from '../support/databases.js';
import {
  admin,
  ADMIN_TOKEN,
  cancelOrder,
  inboxRows,
  json,
  newId,
  orderPlaced,
  placeOrder,
  reservedOf,
  seedBook,
  tableCounts,
  testApp,
  type CommandAnswer,
  type InboxRecord,
  type Problem,
} from '../support/fixtures.js';

/**
 * Producers: who may send commands, and what each can see. A command needs a producer's credential;
 * a producer's keys are its own, so another producer reusing a message id neither sees its outcome
 * nor blocks it; a producer past its rate limit is turned away with nothing recorded.
 */

function apiKey(): string {
  return randomBytes(32).toString('base64url');
}

function webhookSecret(): string {
  return `whsec_${randomBytes(24).toString('base64')}`;
}

const ALICE_KEY = apiKey();
const ALICE_NEXT_KEY = apiKey();
const BOB_KEY = apiKey();
const SHIPPING_SECRET = webhookSecret();
const SHIPPING_NEXT_SECRET = webhookSecret();
const BILLING_SECRET = webhookSecret();

function producer(id: string, apiKeys: string[], webhookSecrets: string[] = [], rateLimitMax?: number): ProducerConfig {
  return { id, apiKeySha256: apiKeys.map(apiKeyDigest), webhookSecrets, rateLimitMax };
}

const PRODUCERS: ProducerConfig[] = [
  producer('alice', [ALICE_KEY, ALICE_NEXT_KEY]),
  producer('bob', [BOB_KEY]),
  producer('shipping', [], [SHIPPING_SECRET, SHIPPING_NEXT_SECRET]),
  producer('billing', [], [BILLING_SECRET]),
];

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

function assertProblem(res: LightMyRequestResponse, status: number, slug: string): Problem {
  assert.equal(res.statusCode, status, `expected ${status} ${slug}, got ${res.statusCode}: ${res.body}`);
  assert.match(String(res.headers['content-type']), /^application\/problem\+json/);
  const body = json<Problem>(res);
  assert.equal(body.type, `/problems/${slug}`);
  return body;
}

function signed(secret: string, body: string, id = `msg_${newId()}`) {
  const at = new Date();
  return {
    'content-type': 'application/json',
    'webhook-id': id,
    'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
    'webhook-signature': new Webhook(secret).sign(id, at, body),
  };
}

for (const target of testDatabases) {
  describe(`producers on ${target.name}`, () => {
    let database: TestDatabaseHandle;
    let app: FastifyInstance;
    let db: Db;

    before(async () => {
      database = await target.open();
      db = database.db;
      app = await testApp(database, { config: { producers: PRODUCERS, rateLimitMax: 0 } });
    });
    after(async () => {
      await app?.close();
      await database?.close();
    });

    test('a command without a credential, or with a wrong one, or with ADMIN_TOKEN, is 401 and records nothing', async () => {
      const book = await seedBook(app, 10);
      const before = await tableCounts(db);
      const message = orderPlaced(book);
      for (const headers of [{}, bearer(apiKey()), bearer(ADMIN_TOKEN), { authorization: `Basic ${ALICE_KEY}` }]) {
        const res = await placeOrder(app, message, headers);
        const problem = assertProblem(res, 401, 'producer-unauthenticated');
        assert.equal(res.headers['www-authenticate'], 'Bearer');
        assert.equal(typeof problem.detail, 'string');
      }
      assert.deepEqual(await tableCounts(db), before);
      assert.equal(await reservedOf(db, book), 0);
    });

    test("producer B sending producer A's messageId is processed as B's own message and never sees A's outcome", async () => {
      const book = await seedBook(app, 10);
      const messageId = `order-${newId()}`;
      const fromAlice = orderPlaced(book, 2, messageId);
      const fromBob = orderPlaced(book, 3, messageId);

      const first = await placeOrder(app, fromAlice, bearer(ALICE_KEY));
      assert.equal(first.statusCode, 201, first.body);
      const alice = json<CommandAnswer>(first);
      assert.equal(alice.messageId, messageId, 'the answer names the message id the producer sent');

      // Another payload under the same id: from Bob it is his message, not a reuse of Alice's key (no 422).
      const second = await placeOrder(app, fromBob, bearer(BOB_KEY));
      assert.equal(second.statusCode, 201, second.body);
      assert.equal(second.headers['idempotent-replayed'], undefined);
      const bob = json<CommandAnswer>(second);
      assert.equal(bob.messageId, messageId);
      assert.notDeepEqual(bob.outcome, alice.outcome);
      assert.equal(await reservedOf(db, book), 5, "both orders reserved: Alice's 2 and Bob's 3");

      // Each producer's copy is answered with its own recorded outcome.
      const aliceAgain = await placeOrder(app, fromAlice, bearer(ALICE_KEY));
      assert.equal(aliceAgain.statusCode, 200);
      assert.deepEqual(json<CommandAnswer>(aliceAgain).outcome, alice.outcome);
      const bobAgain = await placeOrder(app, fromBob, bearer(BOB_KEY));
      assert.equal(bobAgain.statusCode, 200);
      assert.deepEqual(json<CommandAnswer>(bobAgain).outcome, bob.outcome);

      // Alice's payload from Bob is judged against Bob's record of that id, not Alice's: 422 key reuse.
      const bobCopy = await placeOrder(app, fromAlice, bearer(BOB_KEY));
      assertProblem(bobCopy, 422, 'idempotency-key-reused');
      assert.ok(!bobCopy.body.includes(JSON.stringify(alice.outcome)), "Alice's outcome is not in Bob's answer");

      const recorded = (await inboxRows(db)).filter((row) => row.message_id.endsWith(` ${messageId}`)).map((row) => row.message_id);
      assert.deepEqual(recorded.sort(), [`alice ${messageId}`, `bob ${messageId}`]);
      assert.deepEqual(await inboxRows(db, messageId), [], 'no unscoped row');
    });

    test("a key Bob used first does not block Alice's message with that key", async () => {
      const book = await seedBook(app, 10);
      const messageId = `order-${newId()}`;
      const squat = await placeOrder(app, orderPlaced(book, 1, messageId), bearer(BOB_KEY));
      assert.equal(squat.statusCode, 201, squat.body);
      const res = await placeOrder(app, orderPlaced(book, 4, messageId), bearer(ALICE_KEY));
      assert.equal(res.statusCode, 201, res.body);
      assert.equal(json<CommandAnswer>(res).outcome.result, 'reserved');
      assert.equal(await reservedOf(db, book), 5);
    });

    test("both of a producer's API keys are valid (rotation), and they share its keys", async () => {
      const book = await seedBook(app, 10);
      const message = orderPlaced(book);
      const res = await placeOrder(app, message, bearer(ALICE_KEY));
      assert.equal(res.statusCode, 201, res.body);
      const again = await placeOrder(app, message, bearer(ALICE_NEXT_KEY));
      assert.equal(again.statusCode, 200, again.body);
      assert.deepEqual(json<CommandAnswer>(again).outcome, json<CommandAnswer>(res).outcome);
    });

    test('webhook producers are told apart by their secrets; either of two secrets verifies; a bad signature is 401', async () => {
      const book = await seedBook(app, 10);
      const id = `msg_${newId()}`;
      const body = JSON.stringify({ type: 'order.placed', data: orderPlaced(book, 1).data });
      const url = '/inventory/order-placed';
      const shipped = await app.inject({ method: 'POST', url, headers: signed(SHIPPING_SECRET, body, id), payload: body });
      assert.equal(shipped.statusCode, 201, shipped.body);
      const rotated = await app.inject({ method: 'POST', url, headers: signed(SHIPPING_NEXT_SECRET, body, id), payload: body });
      assert.equal(rotated.statusCode, 200, 'the second secret is the same producer');
      const otherBody = JSON.stringify({ type: 'order.placed', data: orderPlaced(book, 2).data });
      const billed = await app.inject({ method: 'POST', url, headers: signed(BILLING_SECRET, otherBody, id), payload: otherBody });
      assert.equal(billed.statusCode, 201, 'another producer, its own message');
      assert.equal(json<CommandAnswer>(billed).messageId, id);
      assert.deepEqual(
        (await inboxRows(db))
          .filter((r) => r.message_id.endsWith(` ${id}`))
          .map((r) => r.message_id)
          .sort(),
        [`billing ${id}`, `shipping ${id}`],
      );

      const before = await tableCounts(db);
      const forged = await app.inject({ method: 'POST', url, headers: signed(webhookSecret(), otherBody), payload: otherBody });
      assertProblem(forged, 401, 'invalid-signature');
      assert.deepEqual(await tableCounts(db), before);
    });

    test("an outcome says what happened to the order without naming another producer's message ids", async () => {
      const [book, other, third] = [await seedBook(app, 10), await seedBook(app, 10), await seedBook(app, 10)];
      const orderId = newId();
      const placed = `leak-1-${newId()}`;
      assert.equal((await placeOrder(app, orderPlaced(book, 2, placed, orderId), bearer(ALICE_KEY))).statusCode, 201);

      const bobPlaces = await placeOrder(app, orderPlaced(book, 2, `b-${newId()}`, orderId), bearer(BOB_KEY));
      assert.equal(bobPlaces.statusCode, 201, bobPlaces.body);
      const bobOutcome = json<CommandAnswer>(bobPlaces).outcome;
      assert.equal(bobOutcome.result, 'already-reserved');
      assert.deepEqual(bobOutcome.existing, { quantity: 2, released: false }, 'what happened, not who did it');
      assert.ok(!bobPlaces.body.includes(placed), bobPlaces.body);
      // Alice's own copy-by-another-id still names her reservation's key.
      const aliceAgain = await placeOrder(app, orderPlaced(book, 2, `a-${newId()}`, orderId), bearer(ALICE_KEY));
      assert.deepEqual(json<CommandAnswer>(aliceAgain).outcome.existing, { quantity: 2, reservedBy: `alice ${placed}`, released: false });

      const cancel = `leak-cancel2-${newId()}`;
      const cancelled = await cancelOrder(app, { messageId: cancel, data: { orderId } }, bearer(ALICE_KEY));
      assert.equal(cancelled.statusCode, 201, cancelled.body);
      const bobAfter = await placeOrder(app, orderPlaced(other, 1, `b-${newId()}`, orderId), bearer(BOB_KEY));
      assert.equal(bobAfter.statusCode, 201, bobAfter.body);
      assert.deepEqual(json<CommandAnswer>(bobAfter).outcome, { result: 'order-cancelled', orderId, bookId: other, quantity: 1 });
      assert.ok(!bobAfter.body.includes(cancel), bobAfter.body);
      const aliceAfter = await placeOrder(app, orderPlaced(third, 1, `a-${newId()}`, orderId), bearer(ALICE_KEY));
      assert.deepEqual(json<CommandAnswer>(aliceAfter).outcome, {
        result: 'order-cancelled',
        orderId,
        bookId: third,
        quantity: 1,
        cancelledBy: `alice ${cancel}`,
      });
      // A copy of Bob's message is answered with his recorded outcome: still no name.
      const bobCopy = await placeOrder(app, orderPlaced(book, 2, json<CommandAnswer>(bobPlaces).messageId, orderId), bearer(BOB_KEY));
      assert.equal(bobCopy.statusCode, 200, bobCopy.body);
      assert.ok(!bobCopy.body.includes(placed), bobCopy.body);
      assert.equal(await reservedOf(db, book), 0, 'released by the cancellation');
    });

    test('a long id (recorded hashed) and the literal id spelling its hash are two messages, in either order', async () => {
      const book = await seedBook(app, 10);
      const hashOf = (id: string) => createHash('sha256').update(id, 'utf8').digest('hex');
      for (const longFirst of [true, false]) {
        const long = `long-${newId()}-${'x'.repeat(200)}`.slice(0, 200);
        const literal = `sha256:${hashOf(long)}`;
        const sends = longFirst ? [long, literal] : [literal, long];
        const answers: CommandAnswer[] = [];
        for (const id of sends) {
          const res = await placeOrder(app, orderPlaced(book, 1, id), bearer(ALICE_KEY));
          assert.equal(res.statusCode, 201, `${id}: ${res.body}`);
          answers.push(json<CommandAnswer>(res));
        }
        assert.deepEqual(
          answers.map((a) => [a.messageId, a.outcome.result]),
          sends.map((id) => [id, 'reserved']),
        );
        // Each is answered with its own outcome on a copy.
        for (const [i, id] of sends.entries()) {
          const copy = await placeOrder(app, orderPlaced(book, 1, id, answers[i]!.outcome.orderId), bearer(ALICE_KEY));
          assert.equal(copy.statusCode, 200, copy.body);
          assert.equal(json<CommandAnswer>(copy).outcome.orderId, answers[i]!.outcome.orderId);
        }
        const keys = (await inboxRows(db)).map((r) => r.message_id).filter((k) => k.startsWith('alice sha256:'));
        assert.ok(keys.includes(`alice sha256:${hashOf(long)}`), 'the long id keeps its hashed key');
        assert.ok(keys.includes(`alice sha256:${hashOf(literal)}`), 'the literal id is recorded under a key of its own');
      }
      assert.equal(await reservedOf(db, book), 4);
      const letters = await db.selectFrom('dead_letters').select('message_id').where('message_id', 'like', 'alice sha256:%').execute();
      assert.deepEqual(letters, [], 'no key-reuse letter');
    });

    test('a message id spelling a hashed CloudEvent key is refused; the CloudEvent keeps its key, in either order', async () => {
      const book = await seedBook(app, 10);
      const url = '/inventory/order-placed';
      for (const eventFirst of [true, false]) {
        const source = `urn:shop:${'s'.repeat(190)}:${newId()}`;
        const id = newId();
        const key = cloudEventKey(source, id);
        assert.match(key, /^ce-sha256:[0-9a-f]{64}$/);
        const event = () =>
          app.inject({
            method: 'POST',
            url,
            headers: { ...bearer(ALICE_KEY), 'ce-specversion': '1.0', 'ce-id': id, 'ce-source': source, 'ce-type': 'order.placed' },
            payload: orderPlaced(book, 1).data,
          });
        const literal = async () => {
          const before = await tableCounts(db);
          const res = await placeOrder(app, orderPlaced(book, 1, key), bearer(ALICE_KEY));
          assertProblem(res, 400, 'invalid-message-key');
          assert.deepEqual(await tableCounts(db), before, 'nothing recorded');
        };
        if (eventFirst) {
          assert.equal((await event()).statusCode, 201);
          await literal();
        } else {
          await literal();
          assert.equal((await event()).statusCode, 201);
        }
      }
      assert.equal(await reservedOf(db, book), 2);
    });

    test("admin routes find a producer's record under its scoped key; a producer key is no admin credential", async () => {
      const book = await seedBook(app, 10);
      const message = orderPlaced(book);
      assert.equal((await placeOrder(app, message, bearer(BOB_KEY))).statusCode, 201);
      const url = `/inbox/inventory.reserve-stock/${encodeURIComponent(`bob ${message.messageId}`)}`;
      const res = await app.inject({ url, headers: admin });
      assert.equal(res.statusCode, 200, res.body);
      assert.equal(json<InboxRecord>(res).messageId, `bob ${message.messageId}`);
      assertProblem(await app.inject({ url, headers: bearer(BOB_KEY) }), 401, 'unauthorized');
    });
  });
}
reportMissingDatabases((name) => `producers on ${name}`);

describe('rate limits per producer', () => {
  let database: TestDatabaseHandle;
  let app: FastifyInstance;
  const LIMITED = [producer('alice', [ALICE_KEY], [], 3), producer('bob', [BOB_KEY])];

  before(async () => {
    database = await testDatabases[0]!.open();
    app = await testApp(database, { config: { producers: LIMITED, rateLimitMax: 100, rateLimitWindowMs: 3_600_000 } });
  });
  after(async () => {
    await app?.close();
    await database?.close();
  });

  test('a burst past the limit is 429 with Retry-After and records nothing; other producers and health probes go on', async () => {
    const book = await seedBook(app, 100);
    for (let i = 0; i < 3; i++) {
      const res = await placeOrder(app, orderPlaced(book, 1), bearer(ALICE_KEY));
      assert.equal(res.statusCode, 201, res.body);
    }
    const before = await tableCounts(database.db);
    const burst = await Promise.all(Array.from({ length: 5 }, () => placeOrder(app, orderPlaced(book, 1), bearer(ALICE_KEY))));
    for (const res of burst) {
      const problem = assertProblem(res, 429, 'rate-limited');
      const retryAfter = Number(res.headers['retry-after']);
      assert.ok(Number.isInteger(retryAfter) && retryAfter > 0, `Retry-After: ${res.headers['retry-after']}`);
      assert.equal(problem.retryAfterSeconds, retryAfter);
    }
    assert.deepEqual(await tableCounts(database.db), before, 'nothing recorded');
    assert.equal(await reservedOf(database.db, book), 3);

    // The limit is the producer's, across command routes; Bob's budget is his own.
    const cancel = await app.inject({
      method: 'POST',
      url: '/inventory/order-cancelled',
      headers: bearer(ALICE_KEY),
      payload: { messageId: `c-${newId()}`, data: { orderId: newId() } },
    });
    assertProblem(cancel, 429, 'rate-limited');
    assert.equal((await placeOrder(app, orderPlaced(book, 1), bearer(BOB_KEY))).statusCode, 201);
    assert.equal((await app.inject({ url: '/health/live' })).statusCode, 200);
    assert.equal((await app.inject({ url: '/health/ready' })).statusCode, 200);
  });

  test('a request without a credential is 401 before any limit is counted', async () => {
    const res = await placeOrder(app, orderPlaced(newId()), {});
    assertProblem(res, 401, 'producer-unauthenticated');
  });
});

describe('admin trust on loopback without ADMIN_TOKEN', () => {
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

  test('a loopback client is trusted; a request from loopback that came through a proxy is not', async () => {
    const direct = await app.inject({ url: '/dead-letters', remoteAddress: '127.0.0.1' });
    assert.equal(direct.statusCode, 200, direct.body);
    for (const headers of [
      { 'x-forwarded-for': '203.0.113.7' },
      { forwarded: 'for=203.0.113.7;proto=https' },
      { 'x-real-ip': '203.0.113.7' },
    ]) {
      const res = await app.inject({ url: '/dead-letters', remoteAddress: '127.0.0.1', headers });
      const problem = assertProblem(res, 403, 'forbidden');
      assert.match(problem.detail ?? '', /proxy/);
    }
    const bookId = newId();
    const put = await app.inject({
      method: 'PUT',
      url: `/stock/${bookId}`,
      remoteAddress: '::1',
      headers: { 'x-forwarded-for': '127.0.0.1' },
      payload: { title: 'Dune', onHand: 5 },
    });
    assertProblem(put, 403, 'forbidden');
    assert.equal((await app.inject({ url: `/stock/${bookId}` })).statusCode, 404, 'nothing was written');
  });

  test('without producer credentials, commands on loopback stay anonymous and unscoped (the README walkthrough)', async () => {
    const book = newId();
    assert.equal((await app.inject({ method: 'PUT', url: `/stock/${book}`, payload: { title: 'Dune', onHand: 5 } })).statusCode, 201);
    const message = orderPlaced(book);
    assert.equal((await placeOrder(app, message)).statusCode, 201);
    assert.equal((await placeOrder(app, message)).statusCode, 200);
    assert.equal((await inboxRows(database.db, message.messageId)).length, 1);
  });
});

describe('anonymous commands opened deliberately beyond loopback (ALLOW_ANONYMOUS_COMMANDS)', () => {
  let database: TestDatabaseHandle;
  let app: FastifyInstance;

  before(async () => {
    database = await testDatabases[0]!.open();
    const config = { host: '0.0.0.0', allowAnonymousCommands: true, rateLimitMax: 2, rateLimitWindowMs: 3_600_000 };
    app = await testApp(database, { config });
  });
  after(async () => {
    await app?.close();
    await database?.close();
  });

  test('are limited per client address', async () => {
    const book = await seedBook(app, 10);
    const from = (remoteAddress: string) =>
      app.inject({ method: 'POST', url: '/inventory/order-placed', remoteAddress, payload: orderPlaced(book, 1) });
    assert.equal((await from('192.0.2.1')).statusCode, 201);
    assert.equal((await from('192.0.2.1')).statusCode, 201);
    assertProblem(await from('192.0.2.1'), 429, 'rate-limited');
    assert.equal((await from('192.0.2.2')).statusCode, 201, 'another client has its own budget');
    assert.equal(await reservedOf(database.db, book), 3);
  });
});
