import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { insertDeadLetter } from '../../src/inbox/dead-letter.repository.js';
import { testDatabases, type TestDatabaseHandle } from '../support/databases.js';
import { ADMIN_TOKEN, newId, orderPlaced, testApp } from '../support/fixtures.js';

/**
 * The admin surface over plain HTTP on a listening socket: which Host it answers to (DNS rebinding), and
 * which state-changing requests it refuses because a browser says another origin's page sent them.
 */

interface Answer {
  status: number;
  body: { type?: string; detail?: string; result?: string };
}

function send(port: number, method: string, path: string, headers: Record<string, string>): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, method, path, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString();
        resolve({ status: res.statusCode ?? 0, body: text === '' ? {} : (JSON.parse(text) as Answer['body']) });
      });
    });
    req.on('error', reject);
    req.end();
  });
}

async function letter(app: FastifyInstance): Promise<string> {
  const payload = orderPlaced(newId(), 1);
  return insertDeadLetter(app.db, {
    consumer: 'inventory.reserve-stock',
    messageId: payload.messageId,
    keySource: 'body',
    payload,
    storedFingerprint: '',
    receivedFingerprint: 'f',
    reason: 'invalid-request',
    receivedAt: new Date(),
  });
}

const target = testDatabases[0]!;

describe('the admin surface under loopback trust (no ADMIN_TOKEN)', () => {
  let database: TestDatabaseHandle;
  let app: FastifyInstance;
  let port: number;

  before(async () => {
    database = await target.open();
    app = await testApp(database, {
      config: { adminToken: undefined, adminAllowedHosts: ['inventory.internal'], inboxPruneIntervalMs: 0 },
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    port = (app.server.address() as { port: number }).port;
  });
  after(async () => {
    await app?.close();
    await database?.close();
  });

  test("a request naming another Host is refused 403 untrusted-host, reads and writes alike; the service's own names are answered", async () => {
    const id = await letter(app);
    for (const host of [
      'attacker.example',
      `attacker.example:${port}`,
      `127.0.0.1.nip.io:${port}`,
      `inventory.internal.attacker.example:${port}`,
    ]) {
      for (const [method, path] of [
        ['GET', '/dead-letters'],
        ['GET', `/dead-letters/${id}`],
        ['GET', '/console'],
        ['POST', `/dead-letters/${id}/replay`],
        ['POST', '/inbox/prune'],
      ] as const) {
        const res = await send(port, method, path, { host });
        assert.equal(res.status, 403, `${method} ${path} with Host ${host}`);
        assert.equal(res.body.type, '/problems/untrusted-host');
      }
    }
    assert.equal((await send(port, 'GET', `/dead-letters/${id}`, { host: `127.0.0.1:${port}` })).status, 200, 'the letter is still there');
    for (const host of [
      `127.0.0.1:${port}`,
      `localhost:${port}`,
      `[::1]:${port}`,
      'localhost',
      `inventory.internal:${port}`,
      'INVENTORY.internal',
    ]) {
      assert.equal((await send(port, 'GET', '/dead-letters', { host })).status, 200, `Host ${host}`);
    }
    // Not admin: the health probe and the stock reads answer any Host.
    assert.equal((await send(port, 'GET', '/health/live', { host: 'attacker.example' })).status, 200);
  });

  test('a state-changing request a browser marks as sent by another origin is refused 403 cross-site-request; same-origin and scripts go through', async () => {
    const own = `127.0.0.1:${port}`;
    const refused: Record<string, string>[] = [
      { origin: `http://127.0.0.1:${port + 1}` },
      { origin: `http://localhost:${port}` },
      { origin: 'null' },
      { 'sec-fetch-site': 'cross-site' },
      { 'sec-fetch-site': 'same-site' },
      { origin: `http://${own}`, 'sec-fetch-site': 'same-site' },
    ];
    for (const headers of refused) {
      const id = await letter(app);
      for (const path of [`/dead-letters/${id}/replay`, '/inbox/prune']) {
        const res = await send(port, 'POST', path, { host: own, ...headers });
        assert.equal(res.status, 403, `${path} ${JSON.stringify(headers)}`);
        assert.equal(res.body.type, '/problems/cross-site-request');
      }
      assert.equal((await send(port, 'GET', `/dead-letters/${id}`, { host: own })).status, 200, 'the letter stays');
    }
    // A read is not refused for its origin (a page of another origin cannot read the answer anyway).
    assert.equal((await send(port, 'GET', '/dead-letters', { host: own, 'sec-fetch-site': 'cross-site' })).status, 200);

    const sameOrigin = await letter(app);
    const replay = await send(port, 'POST', `/dead-letters/${sameOrigin}/replay`, {
      host: own,
      origin: `http://${own}`,
      'sec-fetch-site': 'same-origin',
    });
    assert.equal(replay.status, 200, JSON.stringify(replay.body));
    assert.equal(replay.body.result, 'processed');
    assert.equal((await send(port, 'GET', `/dead-letters/${sameOrigin}`, { host: own })).status, 404, 'replayed, so gone');
    const script = await letter(app);
    assert.equal((await send(port, 'POST', `/dead-letters/${script}/replay`, { host: own })).status, 200, 'curl sends no Origin');
    assert.equal((await send(port, 'POST', '/inbox/prune', { host: own, 'sec-fetch-site': 'none' })).status, 200, 'typed by the user');
  });
});

describe('the admin surface with ADMIN_TOKEN', () => {
  let database: TestDatabaseHandle;
  const apps: FastifyInstance[] = [];

  before(async () => {
    database = await target.open();
  });
  after(async () => {
    for (const app of apps) await app.close();
    await database?.close();
  });

  async function listening(adminAllowedHosts: string[]): Promise<number> {
    const app = await testApp(database, { config: { adminAllowedHosts, inboxPruneIntervalMs: 0 } });
    apps.push(app);
    await app.listen({ port: 0, host: '127.0.0.1' });
    return (app.server.address() as { port: number }).port;
  }

  test('the token is the credential: any Host unless ADMIN_ALLOWED_HOSTS lists them; cross-site writes are refused all the same', async () => {
    const auth = { authorization: `Bearer ${ADMIN_TOKEN}` };
    const open = await listening([]);
    assert.equal((await send(open, 'GET', '/dead-letters', { ...auth, host: 'inventory.example.com' })).status, 200);
    const crossSite = await send(open, 'POST', '/inbox/prune', {
      ...auth,
      host: 'inventory.example.com',
      origin: 'https://attacker.example',
    });
    assert.equal(crossSite.status, 403);
    assert.equal(crossSite.body.type, '/problems/cross-site-request');
    const sameOrigin = { ...auth, host: 'inventory.example.com', origin: 'https://inventory.example.com', 'sec-fetch-site': 'same-origin' };
    assert.equal((await send(open, 'POST', '/inbox/prune', sameOrigin)).status, 200, 'the console behind a proxy that keeps the Host');

    const listed = await listening(['inventory.example.com']);
    assert.equal((await send(listed, 'GET', '/dead-letters', { ...auth, host: 'inventory.example.com' })).status, 200);
    const other = await send(listed, 'GET', '/dead-letters', { ...auth, host: 'attacker.example' });
    assert.equal(other.status, 403);
    assert.equal(other.body.type, '/problems/untrusted-host');
  });
});
