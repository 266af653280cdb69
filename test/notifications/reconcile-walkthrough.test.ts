import assert from 'node:assert/strict';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance, InjectOptions } from 'fastify';
import { buildApp } from '../../src/app.js';
import { flakyEmailProvider } from '../../scripts/flaky-email-provider.js';

/**
 * The README's reconciliation walkthrough, request for request: the service on its default embedded
 * database, its email provider scripts/flaky-email-provider.ts (the first attempt of each key fails
 * after acting), the in-progress list queried with a time relative to now.
 */

const B = '0193a1b2-0000-7000-8000-000000000001';
const O = '0193a1b2-0000-7000-8000-0000000000a1';
const EMAIL = '/notifications/stock-reserved-email';
const RECORDS = '/inbox/notifications.stock-reserved-email';
const J = { 'content-type': 'application/json' };
const email = (messageId: string) => JSON.stringify({ messageId, data: { orderId: O, bookId: B, quantity: 2, email: 'ada@example.org' } });

describe('the README reconciliation walkthrough, against the flaky email provider', () => {
  const provider = flakyEmailProvider(() => {});
  let app: FastifyInstance;

  before(async () => {
    provider.listen(0, '127.0.0.1');
    await once(provider, 'listening');
    const { port } = provider.address() as AddressInfo;
    app = await buildApp({
      logger: false,
      config: {
        databaseUrl: 'pglite:memory',
        adminToken: undefined,
        webhookSecret: undefined,
        emailProvider: 'http',
        emailProviderUrl: `http://127.0.0.1:${port}/emails`,
        inboxPruneIntervalMs: 0,
      },
    });
    await app.ready();
  });
  after(async () => {
    await app?.close();
    provider.close();
  });

  const send = (options: InjectOptions) => app.inject({ remoteAddress: '127.0.0.1', ...options });
  const body = (res: { body: string }) => JSON.parse(res.body) as Record<string, unknown>;

  test('502, 409 needs-reconciliation, listed as in progress before now, settled as completed, then replayed', async () => {
    const failed = await send({ method: 'POST', url: EMAIL, headers: J, payload: email('email-1') });
    assert.equal(failed.statusCode, 502, failed.body);
    assert.equal(body(failed).type, '/problems/email-provider-error');

    const copy = await send({ method: 'POST', url: EMAIL, headers: J, payload: email('email-1') });
    assert.equal(copy.statusCode, 409, copy.body);
    assert.equal(body(copy).type, '/problems/needs-reconciliation');
    assert.equal(body(copy).reconcile, `${RECORDS}/email-1/reconcile`);

    const now = new Date().toISOString();
    const list = await send({ url: `/inbox?consumer=notifications.stock-reserved-email&state=in-progress&olderThan=${now}` });
    assert.equal(list.statusCode, 200, list.body);
    assert.deepEqual(
      (body(list).items as { messageId: string }[]).map((r) => r.messageId),
      ['email-1'],
    );
    const record = await send({ url: `${RECORDS}/email-1` });
    assert.equal(record.statusCode, 200, record.body);

    const settled = await send({
      method: 'POST',
      url: `${RECORDS}/email-1/reconcile`,
      headers: J,
      payload: JSON.stringify({ resolution: 'completed', note: 'delivered per provider log' }),
    });
    assert.equal(settled.statusCode, 200, settled.body);

    const replayed = await send({ method: 'POST', url: EMAIL, headers: J, payload: email('email-1') });
    assert.equal(replayed.statusCode, 200, replayed.body);
    assert.equal(replayed.headers['idempotent-replayed'], 'true');
  });

  test('another failed email, released, is sent by the next delivery: 201 sent', async () => {
    const failed = await send({ method: 'POST', url: EMAIL, headers: J, payload: email('email-2') });
    assert.equal(failed.statusCode, 502, failed.body);
    const released = await send({
      method: 'POST',
      url: `${RECORDS}/email-2/reconcile`,
      headers: J,
      payload: JSON.stringify({ resolution: 'release', note: 'bounced' }),
    });
    assert.equal(released.statusCode, 200, released.body);
    const sent = await send({ method: 'POST', url: EMAIL, headers: J, payload: email('email-2') });
    assert.equal(sent.statusCode, 201, sent.body);
    assert.equal((body(sent).outcome as { result: string }).result, 'sent');
  });
});
