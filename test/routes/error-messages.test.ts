import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/app.js';
import { EXAMPLE_BOOK_ID } from '../../src/http/openapi-examples.js';

/**
 * What a person reads when a request is refused: one true sentence per failing field, the values an
 * enum allows, the media types a route accepts, and framework errors (404, 405, 413, 414, 431) as
 * problem documents like every other error. On a real socket, so that Node's own HTTP parser answers
 * the oversized headers.
 */

interface Problem {
  type: string;
  status: number;
  detail?: string;
  errors?: { location: string; message: string }[];
}

const ORDER = '0193a1b2-0000-7000-8000-0000000000a1';
const J = { 'content-type': 'application/json' };

describe('problem documents a person can act on', () => {
  let app: FastifyInstance;
  let base: string;

  before(async () => {
    app = await buildApp({ logger: false, config: { databaseUrl: 'pglite:memory', adminToken: undefined, webhookSecret: undefined } });
    await app.listen({ port: 0, host: '127.0.0.1' });
    const address = app.server.address();
    assert.ok(address !== null && typeof address === 'object');
    base = `http://127.0.0.1:${address.port}`;
  });
  after(async () => {
    await app?.close();
  });

  async function problemOf(path: string, init: RequestInit = {}): Promise<{ res: Response; body: Problem }> {
    const res = await fetch(`${base}${path}`, { ...init, signal: AbortSignal.timeout(10_000) });
    assert.match(String(res.headers.get('content-type')), /^application\/problem\+json/, `${res.status} for ${path}`);
    return { res, body: (await res.json()) as Problem };
  }

  test('a negative quantity in a correct envelope: one sentence, about the quantity only', async () => {
    const { res, body } = await problemOf('/inventory/order-placed', {
      method: 'POST',
      headers: J,
      body: JSON.stringify({ messageId: 'neg-1', data: { orderId: ORDER, bookId: EXAMPLE_BOOK_ID, quantity: -1 } }),
    });
    assert.equal(res.status, 400);
    assert.equal(body.type, '/problems/invalid-request');
    assert.equal(body.detail, 'body/data/quantity must be >= 1');
    assert.deepEqual(body.errors, [{ location: 'body/data/quantity', message: 'must be >= 1' }]);
  });

  test('several wrong fields: one sentence for each, none about the other body forms', async () => {
    const { body } = await problemOf('/inventory/order-placed', {
      method: 'POST',
      headers: J,
      body: JSON.stringify({ messageId: 'neg-2', data: { orderId: 'x', bookId: EXAMPLE_BOOK_ID, quantity: '2', giftWrap: true } }),
    });
    assert.deepEqual(body.errors, [
      { location: 'body/data', message: 'must not have property "giftWrap"' },
      { location: 'body/data/orderId', message: 'must be a uuid' },
      { location: 'body/data/quantity', message: 'must be an integer' },
    ]);
    assert.equal(
      body.detail,
      'body/data must not have property "giftWrap"; body/data/orderId must be a uuid; body/data/quantity must be an integer',
    );
  });

  test('an enum names its values: a query parameter and a body field', async () => {
    const state = await problemOf('/inbox?state=bogus');
    assert.equal(state.body.detail, 'querystring/state must be one of "in-progress", "completed"');
    const resolution = await problemOf('/inbox/inventory.reserve-stock/abc/reconcile', {
      method: 'POST',
      headers: J,
      body: JSON.stringify({ resolution: 'done', note: 'n' }),
    });
    assert.equal(resolution.res.status, 400);
    assert.equal(resolution.body.detail, 'body/resolution must be one of "completed", "release"');
  });

  test('415 lists the media types the route accepts', async () => {
    const command = await problemOf('/inventory/order-placed', { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'x' });
    assert.equal(command.res.status, 415);
    assert.equal(command.body.detail, 'this route accepts application/json or application/cloudevents+json, not text/plain');
    const stock = await problemOf(`/stock/${EXAMPLE_BOOK_ID}`, { method: 'PUT', headers: { 'content-type': 'text/plain' }, body: 'x' });
    assert.equal(stock.res.status, 415);
    assert.equal(stock.body.detail, 'this route accepts application/json, not text/plain');
  });

  test('framework errors are problem documents of their own type: 404, 405 with Allow, 413, 414, 431', async () => {
    const missing = await problemOf('/nowhere');
    assert.equal(missing.res.status, 404);
    assert.equal(missing.body.type, '/problems/not-found');

    const wrongMethod = await problemOf('/inventory/order-placed');
    assert.equal(wrongMethod.res.status, 405);
    assert.equal(wrongMethod.res.headers.get('allow'), 'POST');
    assert.equal(wrongMethod.body.type, '/problems/method-not-allowed');

    const large = await problemOf('/inventory/order-placed', {
      method: 'POST',
      headers: J,
      body: JSON.stringify({ pad: 'x'.repeat(70_000) }),
    });
    assert.equal(large.res.status, 413);
    assert.equal(large.body.detail, 'request bodies are limited to 64 KiB');

    const long = await problemOf(`/inbox/inventory.reserve-stock/${'k'.repeat(700)}`);
    assert.equal(long.res.status, 414);
    assert.equal(long.body.type, '/problems/uri-too-long');

    const headers = await problemOf('/stock', { headers: { 'x-padding': 'a'.repeat(20_000) } });
    assert.equal(headers.res.status, 431);
    assert.equal(headers.body.type, '/problems/headers-too-large');
    assert.equal(headers.body.status, 431);

    // Each of those types is documented at its own address, with the status it is sent with.
    for (const [slug, status] of [
      ['method-not-allowed', 405],
      ['uri-too-long', 414],
      ['headers-too-large', 431],
    ] as const) {
      const res = await fetch(`${base}/problems/${slug}`);
      assert.equal(res.status, 200);
      assert.equal(((await res.json()) as Problem).status, status);
    }
  });

  test('GET / points to the documentation: links for a program, a redirect for a browser', async () => {
    const res = await fetch(`${base}/`);
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { service: 'Bookstore Inventory', docs: '/docs', openapi: '/docs/json', health: '/health/ready' });
    assert.match(String(res.headers.get('link')), /<\/docs>; rel="service-doc"/);
    const browser = await fetch(`${base}/`, { headers: { accept: 'text/html,application/xhtml+xml' }, redirect: 'manual' });
    assert.equal(browser.status, 302);
    assert.equal(browser.headers.get('location'), '/docs');
  });
});
