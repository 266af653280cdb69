import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { CloudEvent, HTTP, type Message } from 'cloudevents';
import type { FastifyInstance } from 'fastify';
import { Webhook } from 'standardwebhooks';
import { cloudEventKey, KeySourceError, resolveMessageKey } from '../../src/inbox/key-sources.js';
import { fingerprint } from '../../src/inbox/fingerprint.js';
import { reportMissingDatabases, testDatabases, type TestDatabaseHandle } from '../support/databases.js';
import {
  admin,
  inboxRows,
  json,
  newId,
  orderPlaced,
  placeOrder,
  reservedOf,
  seedBook,
  tableCounts,
  testApp,
  type Problem,
  type CommandAnswer,
  type DeadLetter,
  type Page,
} from '../support/fixtures.js';

/** POSTs an order-placed CloudEvent as the cloudevents SDK's HTTP emitter formats it. */
function sendCloudEvent(app: FastifyInstance, message: Message) {
  return app.inject({
    method: 'POST',
    url: '/inventory/order-placed',
    headers: message.headers as Record<string, string>,
    payload: message.body as string,
  });
}

const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const WRONG_SECRET = 'whsec_aGVsbG8gd29ybGQgdGhpcyBpcyB3cm9uZw==';

describe('key resolution (unit)', () => {
  test('a CloudEvent key is source|id; the same id from another source is another key', () => {
    assert.equal(cloudEventKey('urn:ordering', 'e-1'), 'urn:ordering|e-1');
    assert.notEqual(cloudEventKey('urn:ordering', 'e-1'), cloudEventKey('urn:billing', 'e-1'));
  });

  test('a CloudEvent key that would not fit, or is not visible ASCII, is hashed, never truncated', () => {
    const long = `https://example.org/${'x'.repeat(250)}`;
    const a = cloudEventKey(long, 'e-1');
    const b = cloudEventKey(`${long}y`, 'e-1');
    assert.match(a, /^ce-sha256:[0-9a-f]{64}$/);
    assert.notEqual(a, b, 'sources differing past the column length stay distinct');
    assert.match(cloudEventKey('urn:x', 'id with space'), /^ce-sha256:/);
    assert.notEqual(cloudEventKey('a|b', 'c'), cloudEventKey('a', 'b|c'), 'a | inside the source cannot make two events collide');
  });

  // Found by test/fuzz.test.ts: the canonicalize package throws on a lone surrogate, which JSON can carry (a 500).
  test('a CloudEvent id or source with a lone surrogate has a stable hashed key', () => {
    const key = cloudEventKey('urn:ordering', 'e-\ud800');
    assert.match(key, /^ce-sha256:[0-9a-f]{64}$/);
    assert.equal(cloudEventKey('urn:ordering', 'e-\ud800'), key);
    assert.notEqual(cloudEventKey('urn:ordering', 'e-\udc00'), key);
    assert.notEqual(cloudEventKey('urn:\udfff', 'e-1'), cloudEventKey('urn:\udffe', 'e-1'));
    assert.equal(
      cloudEventKey('urn:x', 'id with space'),
      cloudEventKey('urn:x', 'id with space'),
      'keys of well-formed text are what they were',
    );
  });

  test('a hashed CloudEvent key is refused from any other source alone, taken beside the event it belongs to', () => {
    const source = `urn:shop:${'s'.repeat(200)}`;
    const key = cloudEventKey(source, 'e-1');
    assert.throws(
      () => resolveMessageKey({ 'webhook-id': key }, {}),
      (error: unknown) => error instanceof KeySourceError && error.failure === 'invalid',
    );
    assert.throws(
      () => resolveMessageKey({}, { body: key }),
      (error: unknown) => error instanceof KeySourceError && error.failure === 'invalid',
    );
    assert.deepEqual(resolveMessageKey({ 'webhook-id': key }, { cloudEvent: { source, id: 'e-1' } }), {
      messageId: key,
      source: 'standard-webhooks',
    });
    assert.throws(
      () => resolveMessageKey({ 'webhook-id': key }, { cloudEvent: { source, id: 'e-2' } }),
      (error: unknown) => error instanceof KeySourceError && error.failure === 'conflict',
    );
  });

  test('several sources that agree are one key; the most specific source is recorded', () => {
    assert.deepEqual(resolveMessageKey({ 'idempotency-key': 'k-1' }, { body: 'k-1' }), { messageId: 'k-1', source: 'idempotency-key' });
    assert.deepEqual(resolveMessageKey({ 'webhook-id': 'msg_1', 'idempotency-key': '"msg_1"' }, {}), {
      messageId: 'msg_1',
      source: 'standard-webhooks',
    });
  });

  test('no key, an invalid key, or two keys that differ are refused with the reason', () => {
    const failure = (fn: () => unknown) => {
      try {
        fn();
      } catch (error) {
        assert.ok(error instanceof KeySourceError);
        return error.failure;
      }
      assert.fail('expected a KeySourceError');
    };
    assert.equal(
      failure(() => resolveMessageKey({}, {})),
      'missing',
    );
    assert.equal(
      failure(() => resolveMessageKey({ 'idempotency-key': 'a' }, { body: 'b' })),
      'conflict',
    );
    assert.equal(
      failure(() => resolveMessageKey({ 'webhook-id': 'a' }, { body: 'b' })),
      'conflict',
    );
    assert.equal(
      failure(() => resolveMessageKey({ 'idempotency-key': 'x'.repeat(201) }, {})),
      'invalid',
    );
    assert.equal(
      failure(() => resolveMessageKey({ 'idempotency-key': '"unterminated' }, {})),
      'invalid',
    );
  });

  test('the fingerprint ignores key order and whitespace, not values', () => {
    assert.equal(fingerprint({ a: 1, b: [1, 2] }), fingerprint(JSON.parse('{ "b": [1,2],   "a": 1 }')));
    assert.notEqual(fingerprint({ a: 1 }), fingerprint({ a: 2 }));
  });
});

reportMissingDatabases((name) => `every key source and the 422, through HTTP, on ${name}`);
for (const target of testDatabases) {
  describe(`every way a key arrives, through HTTP, on ${target.name}`, () => {
    let database: TestDatabaseHandle;
    let app: FastifyInstance;

    before(async () => {
      database = await target.open();
      app = await testApp(database);
    });
    after(async () => {
      await app?.close();
      await database?.close();
    });

    async function keyRow(messageId: string) {
      const rows = await inboxRows(database.db, messageId);
      assert.equal(rows.length, 1, `one inbox row for ${messageId}`);
      return rows[0]!;
    }

    test('body messageId', async () => {
      const book = await seedBook(app, 10);
      const message = orderPlaced(book);
      assert.equal((await placeOrder(app, message)).statusCode, 201);
      assert.equal((await keyRow(message.messageId)).key_source, 'body');
    });

    test('Idempotency-Key header, bare and as a structured-field string', async () => {
      const book = await seedBook(app, 10);
      const { data } = orderPlaced(book);
      const bare = await placeOrder(app, { data }, { 'idempotency-key': 'order-42-attempt' });
      assert.equal(bare.statusCode, 201);
      assert.equal((await keyRow('order-42-attempt')).key_source, 'idempotency-key');
      const quoted = await placeOrder(app, { data }, { 'idempotency-key': '"order-42-attempt"' });
      assert.equal(quoted.statusCode, 200, 'the structured-field form names the same key');
    });

    test('CloudEvents structured mode, produced by the cloudevents SDK', async () => {
      const book = await seedBook(app, 10);
      const { data } = orderPlaced(book, 3);
      const event = new CloudEvent({ id: newId(), source: 'urn:bookstore:ordering', type: 'bookstore.order-placed', data });
      const { headers, body } = HTTP.structured(event);
      const res = await sendCloudEvent(app, { headers, body });
      assert.equal(res.statusCode, 201, res.body);
      assert.equal(json<CommandAnswer>(res).keySource, 'cloudevents');
      assert.equal(json<CommandAnswer>(res).messageId, `urn:bookstore:ordering|${event.id}`);
      assert.equal((await keyRow(`urn:bookstore:ordering|${event.id}`)).key_source, 'cloudevents');
      assert.equal(await reservedOf(database.db, book), 3);

      const again = await sendCloudEvent(app, { headers, body });
      assert.equal(again.statusCode, 200);
    });

    test('CloudEvents binary mode, produced by the cloudevents SDK; the same id from another source is another event', async () => {
      const book = await seedBook(app, 10);
      const { data } = orderPlaced(book, 1);
      const id = newId();
      const event = new CloudEvent({ id, source: 'urn:bookstore:ordering', type: 'bookstore.order-placed', data });
      const { headers, body } = HTTP.binary(event);
      const res = await sendCloudEvent(app, { headers, body });
      assert.equal(res.statusCode, 201, res.body);
      assert.equal((await keyRow(`urn:bookstore:ordering|${id}`)).key_source, 'cloudevents');

      const otherSource = HTTP.binary(new CloudEvent({ id, source: 'urn:bookstore:replay', type: 'bookstore.order-placed', data }));
      const second = await sendCloudEvent(app, otherSource);
      assert.equal(second.statusCode, 201, 'not a duplicate: CloudEvents identity is source + id');
      assert.equal(json<CommandAnswer>(second).outcome.result, 'already-reserved', 'the order itself is still reserved once');
      assert.equal(await reservedOf(database.db, book), 1);
    });

    test('a CloudEvent whose source + id exceed the column is stored under its hash', async () => {
      const book = await seedBook(app, 10);
      const source = `https://ordering.example/${'s'.repeat(220)}`;
      const event = new CloudEvent({ id: 'e-1', source, type: 'bookstore.order-placed', data: orderPlaced(book).data });
      const { headers, body } = HTTP.structured(event);
      const res = await sendCloudEvent(app, { headers, body });
      assert.equal(res.statusCode, 201, res.body);
      assert.equal(json<CommandAnswer>(res).messageId, cloudEventKey(source, 'e-1'));
      assert.match(json<CommandAnswer>(res).messageId, /^ce-sha256:/);
    });

    test('a structured CloudEvent whose id has a lone surrogate: 201 under the hashed key, its copy 200', async () => {
      const book = await seedBook(app, 10);
      const payload = `{"specversion":"1.0","id":"e-\\ud800-${newId()}","source":"urn:bookstore:ordering","type":"bookstore.order-placed","data":${JSON.stringify(orderPlaced(book).data)}}`;
      const send = () =>
        app.inject({
          method: 'POST',
          url: '/inventory/order-placed',
          headers: { 'content-type': 'application/cloudevents+json' },
          payload,
        });
      const first = await send();
      assert.equal(first.statusCode, 201, first.body);
      assert.match(json<CommandAnswer>(first).messageId, /^ce-sha256:/);
      assert.equal((await send()).statusCode, 200);
      assert.equal(await reservedOf(database.db, book), 2);
    });

    test('Standard Webhooks webhook-id without a configured secret is accepted as the key', async () => {
      const book = await seedBook(app, 10);
      const { data } = orderPlaced(book);
      const res = await placeOrder(app, { data }, { 'webhook-id': 'msg_2KWPBgLlAfxdpx2AI54pPJ85f4W' });
      assert.equal(res.statusCode, 201);
      assert.equal((await keyRow('msg_2KWPBgLlAfxdpx2AI54pPJ85f4W')).key_source, 'standard-webhooks');
    });

    test('reordered JSON keys are the same command: 200 replay; uppercase uuids are the same uuids', async () => {
      const book = await seedBook(app, 10);
      const orderId = newId();
      const first = `{"messageId":"fp-1-${orderId}","data":{"orderId":"${orderId}","bookId":"${book}","quantity":2}}`;
      const reordered = `{ "data": { "quantity": 2, "bookId": "${book.toUpperCase()}", "orderId": "${orderId}" }, "messageId": "fp-1-${orderId}" }`;
      const a = await app.inject({
        method: 'POST',
        url: '/inventory/order-placed',
        headers: { 'content-type': 'application/json' },
        payload: first,
      });
      const b = await app.inject({
        method: 'POST',
        url: '/inventory/order-placed',
        headers: { 'content-type': 'application/json' },
        payload: reordered,
      });
      assert.equal(a.statusCode, 201);
      assert.equal(b.statusCode, 200);
    });

    test('the same key with a changed quantity: 422 with both fingerprints, nothing applied, one dead letter', async () => {
      const book = await seedBook(app, 10);
      const message = orderPlaced(book, 2);
      const first = await placeOrder(app, message);
      assert.equal(first.statusCode, 201);
      const before = await tableCounts(database.db);

      const changed = { ...message, data: { ...message.data, quantity: 5 } };
      const res = await placeOrder(app, changed);

      assert.equal(res.statusCode, 422);
      const problem = json<Problem>(res);
      assert.equal(problem.type, '/problems/idempotency-key-reused');
      assert.equal(problem.storedFingerprint, fingerprint(message.data));
      assert.equal(problem.receivedFingerprint, fingerprint(changed.data));
      assert.equal(await reservedOf(database.db, book), 2, 'the changed copy reserved nothing');
      const afterCounts = await tableCounts(database.db);
      assert.deepEqual(afterCounts, { ...before, dead_letters: before.dead_letters! + 1 });

      const letter = await app.inject({ url: String(problem.deadLetter), headers: admin });
      assert.equal(letter.statusCode, 200);
      assert.deepEqual(
        { ...json<DeadLetter>(letter), id: undefined, receivedAt: undefined },
        {
          id: undefined,
          receivedAt: undefined,
          consumer: 'inventory.reserve-stock',
          messageId: message.messageId,
          keySource: 'body',
          payload: changed.data,
          storedFingerprint: problem.storedFingerprint,
          receivedFingerprint: problem.receivedFingerprint,
          reason: 'fingerprint-mismatch',
          detail: null,
        },
      );
      const list = await app.inject({ url: '/dead-letters?consumer=inventory.reserve-stock&limit=10', headers: admin });
      assert.equal(list.statusCode, 200);
      assert.ok(json<Page<DeadLetter>>(list).items.some((l) => l.messageId === message.messageId));
      const unauthorized = await app.inject({ url: '/dead-letters' });
      assert.equal(unauthorized.statusCode, 401);
      const overflowing = await app.inject({ url: '/dead-letters/99999999999999999999', headers: admin });
      assert.equal(overflowing.statusCode, 400, 'an id past bigint is a bad request, not a database error');
      assert.equal((await app.inject({ url: '/dead-letters/123456789', headers: admin })).statusCode, 404);

      const original = await placeOrder(app, message);
      assert.equal(original.statusCode, 200, 'the original payload still replays');
    });
  });

  describe(`Standard Webhooks with WEBHOOK_SECRET set, on ${target.name}`, () => {
    let database: TestDatabaseHandle;
    let app: FastifyInstance;
    const signer = new Webhook(SECRET);

    before(async () => {
      database = await target.open();
      app = await testApp(database, { config: { webhookSecret: SECRET } });
    });
    after(async () => {
      await app?.close();
      await database?.close();
    });

    function signed(body: string, id = `msg_${newId()}`, at = new Date(), key = signer) {
      return {
        'content-type': 'application/json',
        'webhook-id': id,
        'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
        'webhook-signature': key.sign(id, at, body),
      };
    }

    test('a delivery signed by the standardwebhooks library is processed, keyed by webhook-id', async () => {
      const book = await seedBook(app, 10);
      const body = JSON.stringify({ type: 'order.placed', data: orderPlaced(book).data });
      const headers = signed(body);
      const res = await app.inject({ method: 'POST', url: '/inventory/order-placed', headers, payload: body });
      assert.equal(res.statusCode, 201, res.body);
      assert.equal(json<CommandAnswer>(res).keySource, 'standard-webhooks');
      assert.equal(json<CommandAnswer>(res).messageId, headers['webhook-id']);
      const retry = await app.inject({ method: 'POST', url: '/inventory/order-placed', headers, payload: body });
      assert.equal(retry.statusCode, 200, 'a webhook retry carries the same id and signature: replayed');
    });

    // Found by test/fuzz.test.ts: the verifier JSON.parse'd the raw body again after the signature
    // matched, and threw on the byte order mark the body parser accepts (a 500).
    test('a signed body that starts with a byte order mark is processed like any other: 201', async () => {
      const book = await seedBook(app, 10);
      const body = `\ufeff${JSON.stringify({ data: orderPlaced(book).data })}`;
      const res = await app.inject({ method: 'POST', url: '/inventory/order-placed', headers: signed(body), payload: body });
      assert.equal(res.statusCode, 201, res.body);
      assert.equal(await reservedOf(database.db, book), 2);
    });

    test('tampered body, wrong secret, stale timestamp, missing signature: 401, nothing recorded', async () => {
      const book = await seedBook(app, 10);
      const body = JSON.stringify({ data: orderPlaced(book).data });
      const before = await tableCounts(database.db);
      const cases: [string, Record<string, string>, string][] = [
        ['tampered body', signed(body), body.replace('"quantity":2', '"quantity":3')],
        ['wrong secret', signed(body, undefined, new Date(), new Webhook(WRONG_SECRET)), body],
        ['stale timestamp', signed(body, undefined, new Date(Date.now() - 10 * 60_000)), body],
        ['future timestamp', signed(body, undefined, new Date(Date.now() + 10 * 60_000)), body],
        ['missing signature', { 'content-type': 'application/json', 'idempotency-key': `k-${newId()}` }, body],
      ];
      for (const [name, headers, payload] of cases) {
        const res = await app.inject({ method: 'POST', url: '/inventory/order-placed', headers, payload });
        assert.equal(res.statusCode, 401, name);
        assert.equal(json<Problem>(res).type, '/problems/invalid-signature', name);
      }
      assert.deepEqual(await tableCounts(database.db), before);
      assert.equal(await reservedOf(database.db, book), 0);
    });
  });
}
