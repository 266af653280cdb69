import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { chromium, type BrowserContext } from 'playwright-core';
import { insertDeadLetter } from '../../src/inbox/dead-letter.repository.js';
import { testDatabases, type TestDatabaseHandle } from '../support/databases.js';
import { inboxRows, orderPlaced, placeOrder, seedBook, testApp } from '../support/fixtures.js';
import { CHROMIUM, CHROMIUM_ARGS, noChromium } from '../support/chromium.js';

/**
 * Under loopback trust (no ADMIN_TOKEN), a page of another loopback origin, open in the operator's own
 * Chromium, tries the admin actions it can send blind (no-cors POSTs: replay a dead letter, prune the
 * inbox). The service refuses them: the letter stays, nothing is pruned. The service's own page does
 * the same and it works.
 */

const DAY_MS = 86_400_000;

describe('admin actions from a page of another origin, in Chromium', { skip: noChromium }, () => {
  let database: TestDatabaseHandle;
  let app: FastifyInstance;
  let attacker: Server;
  let attackerPort: number;
  let service: string;
  let context: BrowserContext;
  let profile: string;
  let offsetMs = 0;

  before(async () => {
    database = await testDatabases[0]!.open();
    app = await testApp(database, {
      config: { adminToken: undefined, inboxPruneIntervalMs: 0 },
      now: () => new Date(Date.now() + offsetMs),
    });
    service = await app.listen({ port: 0, host: '127.0.0.1' });
    attacker = createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html><title>offers</title>'));
    await new Promise<void>((resolve) => attacker.listen(0, '127.0.0.1', resolve));
    attackerPort = (attacker.address() as { port: number }).port;
    profile = await mkdtemp(join(tmpdir(), 'bookstore-cross-site-chromium-'));
    context = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
    context.setDefaultTimeout(30_000);
  });
  after(async () => {
    await context?.close();
    await new Promise((resolve) => attacker?.close(resolve));
    await app?.close();
    if (profile !== undefined) await rm(profile, { recursive: true, force: true });
    await database?.close();
  });

  test('no-cors POSTs to replay and prune from another loopback origin are refused: the letter stays, nothing is pruned; the same from the service works', async () => {
    const book = await seedBook(app, 10);
    const processed = orderPlaced(book, 1);
    assert.equal((await placeOrder(app, processed)).statusCode, 201);
    const letterPayload = orderPlaced(book, 2);
    const letter = await insertDeadLetter(app.db, {
      consumer: 'inventory.reserve-stock',
      messageId: letterPayload.messageId,
      keySource: 'body',
      payload: letterPayload,
      storedFingerprint: '',
      receivedFingerprint: 'f',
      reason: 'invalid-request',
      receivedAt: app.now(),
    });
    // Past every retention: a prune that ran would delete the inbox row and the letter.
    offsetMs = 120 * DAY_MS;

    const page = await context.newPage();
    const statuses: { url: string; status: number }[] = [];
    page.on('response', (response) => {
      if (response.url().startsWith(service)) statuses.push({ url: response.url(), status: response.status() });
    });
    for (const origin of [`http://localhost:${attackerPort}`, `http://127.0.0.1:${attackerPort}`]) {
      await page.goto(`${origin}/`);
      const sent = await page.evaluate(
        async ({ target, id }) => {
          const types: string[] = [];
          for (const path of [`/dead-letters/${id}/replay`, '/inbox/prune']) {
            const res = await fetch(`${target}${path}`, { method: 'POST', mode: 'no-cors' });
            types.push(res.type);
          }
          return types;
        },
        { target: service, id: letter },
      );
      assert.deepEqual(sent, ['opaque', 'opaque'], 'the requests went out');
    }
    assert.deepEqual(
      statuses.map((s) => s.status),
      [403, 403, 403, 403],
    );
    const still = await app.inject({ url: `/dead-letters/${letter}` });
    assert.equal(still.statusCode, 200, 'the letter stays');
    assert.equal((await inboxRows(database.db, processed.messageId)).length, 1, 'nothing was pruned');
    assert.equal((await inboxRows(database.db, letterPayload.messageId)).length, 0, 'nothing was replayed');

    // The service's own page (the console's origin) replays it.
    await page.goto(`${service}/console`);
    const replayed = await page.evaluate(async (id) => {
      const res = await fetch(`/dead-letters/${id}/replay`, { method: 'POST' });
      return { status: res.status, body: (await res.json()) as { result?: string } };
    }, letter);
    assert.deepEqual([replayed.status, replayed.body.result], [200, 'processed']);
    assert.equal((await app.inject({ url: `/dead-letters/${letter}` })).statusCode, 404, 'replayed, so gone');
    await page.close();
  });
});
