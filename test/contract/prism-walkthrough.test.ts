import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { OPENAPI_FILE } from '../../scripts/write-openapi.js';
import { publishedValidator, type OpenApiDocument } from '../support/openapi-doc.js';
import { startPrismProxy, type PrismProxy } from '../support/prism-proxy.js';
import { startServer, type ServerProcess } from '../support/server-process.js';

/**
 * The README's curl walkthrough sent through Stoplight Prism's validating proxy in front of a running
 * service: an independent validator checks every request and every answer against openapi/openapi.json.
 * Zero violations for the valid requests; the invalid one is caught.
 */

const TOKEN = 'contract-admin-token-0123456789';
const B = '0193a1b2-0000-7000-8000-000000000001';
const O = '0193a1b2-0000-7000-8000-0000000000a1';
const O2 = '0193a1b2-0000-7000-8000-0000000000a2';
const O3 = '0193a1b2-0000-7000-8000-0000000000a3';
const O4 = '0193a1b2-0000-7000-8000-0000000000a4';
const O5 = '0193a1b2-0000-7000-8000-0000000000a5';
const J = { 'content-type': 'application/json' };
const AUTH = { authorization: `Bearer ${TOKEN}` };

interface Step {
  name: string;
  method?: string;
  path: string;
  headers?: Record<string, string>;
  body?: unknown;
  status: number;
  /** Prism 5.16 picks the application/json schema for an application/cloudevents+json request (it drops the +json suffix). */
  structuredCloudEvent?: boolean;
}

const placed = (messageId: string, quantity: number, orderId = O) => ({ messageId, data: { orderId, bookId: B, quantity } });

const WALKTHROUGH: Step[] = [
  { name: 'set stock', method: 'PUT', path: `/stock/${B}`, headers: { ...J, ...AUTH }, body: { title: 'Dune', onHand: 10 }, status: 201 },
  { name: 'order placed', method: 'POST', path: '/inventory/order-placed', headers: J, body: placed('m-1', 2), status: 201 },
  {
    name: 'the same message again: a duplicate',
    method: 'POST',
    path: '/inventory/order-placed',
    headers: J,
    body: placed('m-1', 2),
    status: 200,
  },
  { name: 'one book', path: `/stock/${B}`, status: 200 },
  { name: 'all stock, no limit given', path: '/stock', status: 200 },
  { name: 'all stock, a page of one', path: `/stock?limit=1&after=${O}`, status: 200 },
  {
    name: 'a producer duplicate: new messageId, same order',
    method: 'POST',
    path: '/inventory/order-placed',
    headers: J,
    body: placed('m-2', 2),
    status: 201,
  },
  {
    name: 'the same messageId to another consumer',
    method: 'POST',
    path: '/inventory/order-cancelled',
    headers: J,
    body: { messageId: 'm-1', data: { orderId: O } },
    status: 201,
  },
  {
    name: 'the key reused with another payload',
    method: 'POST',
    path: '/inventory/order-placed',
    headers: J,
    body: placed('m-1', 5),
    status: 422,
  },
  {
    name: 'no key at all',
    method: 'POST',
    path: '/inventory/order-placed',
    headers: J,
    body: { data: { orderId: O2, bookId: B, quantity: 1 } },
    status: 400,
  },
  {
    name: 'Idempotency-Key header',
    method: 'POST',
    path: '/inventory/order-placed',
    headers: { ...J, 'idempotency-key': '"order-77-v1"' },
    body: { data: { orderId: O2, bookId: B, quantity: 1 } },
    status: 201,
  },
  {
    name: 'CloudEvents structured mode',
    method: 'POST',
    path: '/inventory/order-placed',
    headers: { 'content-type': 'application/cloudevents+json' },
    body: {
      specversion: '1.0',
      id: 'e-1',
      source: 'urn:bookstore:ordering',
      type: 'bookstore.order-placed',
      data: { orderId: O3, bookId: B, quantity: 1 },
    },
    status: 201,
    structuredCloudEvent: true,
  },
  {
    name: 'CloudEvents binary mode',
    method: 'POST',
    path: '/inventory/order-placed',
    headers: { ...J, 'ce-specversion': '1.0', 'ce-id': 'e-2', 'ce-source': 'urn:bookstore:ordering', 'ce-type': 'bookstore.order-placed' },
    body: { orderId: O4, bookId: B, quantity: 1 },
    status: 201,
  },
  {
    name: 'Standard Webhooks',
    method: 'POST',
    path: '/inventory/order-placed',
    headers: { ...J, 'webhook-id': 'msg_2KWPBgLlAfxdpx2AI54pPJ85f4W' },
    body: { type: 'order.placed', data: { orderId: O5, bookId: B, quantity: 1 } },
    status: 201,
  },
  {
    name: 'the stock-reserved email',
    method: 'POST',
    path: '/notifications/stock-reserved-email',
    headers: J,
    body: { messageId: 'm-1', data: { orderId: O, bookId: B, quantity: 2, email: 'ada@example.org' } },
    status: 201,
  },
  {
    name: 'inbox records in progress',
    path: `/inbox?consumer=notifications.stock-reserved-email&state=in-progress&olderThan=${new Date(Date.now() + 60_000).toISOString()}`,
    headers: AUTH,
    status: 200,
  },
  { name: 'all inbox records, no limit given', path: '/inbox', headers: AUTH, status: 200 },
  { name: 'one inbox record', path: '/inbox/notifications.stock-reserved-email/m-1', headers: AUTH, status: 200 },
  {
    name: 'reconcile a completed record',
    method: 'POST',
    path: '/inbox/notifications.stock-reserved-email/m-1/reconcile',
    headers: { ...J, ...AUTH },
    body: { resolution: 'completed', note: 'delivered per provider log' },
    status: 409,
  },
  { name: 'an unknown inbox record', path: '/inbox/inventory.reserve-stock/no-such-message', headers: AUTH, status: 404 },
  { name: 'dead letters', path: '/dead-letters', headers: AUTH, status: 200 },
  { name: 'one dead letter', path: '/dead-letters/1', headers: AUTH, status: 200 },
  { name: 'prune now', method: 'POST', path: '/inbox/prune', headers: AUTH, status: 200 },
  { name: 'liveness', path: '/health/live', status: 200 },
  { name: 'readiness', path: '/health/ready', status: 200 },
  { name: 'a problem type', path: '/problems/idempotency-key-reused', status: 200 },
  { name: 'metrics', path: '/metrics', status: 200 },
];

describe("the README walkthrough through Prism's validating proxy", () => {
  let server: ServerProcess;
  let prism: PrismProxy;
  let prismNoRequestCheck: PrismProxy;
  let emailDir: string;
  let validate: ReturnType<typeof publishedValidator>;

  before(async () => {
    emailDir = await mkdtemp(join(tmpdir(), 'bookstore-contract-'));
    validate = publishedValidator(JSON.parse(await readFile(OPENAPI_FILE, 'utf8')) as OpenApiDocument);
    server = await startServer({ DATABASE_URL: 'pglite:memory', ADMIN_TOKEN: TOKEN, EMAIL_LOG_FILE: join(emailDir, 'emails.jsonl') });
    [prism, prismNoRequestCheck] = await Promise.all([
      startPrismProxy(OPENAPI_FILE, server.baseUrl),
      startPrismProxy(OPENAPI_FILE, server.baseUrl, { validateRequest: false }),
    ]);
  });
  after(async () => {
    await Promise.all([prism?.stop(), prismNoRequestCheck?.stop(), server?.stop()]);
    await rm(emailDir, { recursive: true, force: true });
  });

  test('every request and every answer matches openapi/openapi.json: no violation', async () => {
    for (const step of WALKTHROUGH) {
      let proxy = prism;
      if (step.structuredCloudEvent === true) {
        // Prism would check this body against the application/json schema; check it against its own media type here instead.
        const pointer = ['paths', step.path, 'post', 'requestBody', 'content', 'application/cloudevents+json', 'schema'];
        assert.deepEqual(validate(pointer, step.body), [], `${step.name}: the request matches the published CloudEvent schema`);
        proxy = prismNoRequestCheck;
      }
      const res = await fetch(`${proxy.baseUrl}${step.path}`, {
        method: step.method ?? 'GET',
        headers: step.headers ?? {},
        body: step.body === undefined ? undefined : JSON.stringify(step.body),
        signal: AbortSignal.timeout(30_000),
      });
      const text = await res.text();
      assert.equal(res.headers.get('sl-violations'), null, `${step.name}: Prism found violations: ${res.headers.get('sl-violations')}`);
      assert.equal(res.status, step.status, `${step.name}: ${text}`);
      if (step.status === 200 && step.method === 'POST' && step.path.startsWith('/inventory/')) {
        assert.equal(res.headers.get('idempotent-replayed'), 'true', step.name);
      }
    }
    for (const proxy of [prism, prismNoRequestCheck]) {
      assert.doesNotMatch(proxy.logs(), /Violation|did not pass the validation rules/, 'Prism logged no violation');
    }
  });

  test('the proxy does validate: a quantity sent as a string is refused by Prism before it reaches the service', async () => {
    const res = await fetch(`${prism.baseUrl}/inventory/order-placed`, {
      method: 'POST',
      headers: J,
      body: JSON.stringify({ messageId: 'm-9', data: { orderId: O2, bookId: B, quantity: '2' } }),
      signal: AbortSignal.timeout(30_000),
    });
    const body = (await res.json()) as { type: string; validation?: { message: string }[] };
    assert.equal(res.status, 422);
    assert.match(body.type, /prism\/errors#UNPROCESSABLE_ENTITY/);
    assert.ok(
      body.validation?.some((v) => /quantity must be integer/.test(v.message)),
      JSON.stringify(body),
    );
  });
});
