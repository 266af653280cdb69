import assert from 'node:assert/strict';
import { connect, type AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { BODY_LIMIT_BYTES } from '../../src/app.js';
import { testDatabases, type TestDatabaseHandle } from '../support/databases.js';
import { admin, json, newId, orderPlaced, seedBook, tableCounts, testApp, type Problem } from '../support/fixtures.js';
import { sample, scrape } from './prometheus.js';

const COMMAND_URLS = ['/inventory/order-placed', '/inventory/order-cancelled', '/notifications/stock-reserved-email'];

function assertProblem(res: LightMyRequestResponse, status: number, slug: string): void {
  assert.equal(res.statusCode, status, res.body);
  assert.match(String(res.headers['content-type']), /^application\/problem\+json/);
  const body = json<Problem>(res);
  assert.equal(body.type, `/problems/${slug}`);
  assert.equal(body.status, status);
  assert.equal(typeof body.title, 'string');
}

/** A JSON envelope padded to exactly `bytes` bytes. */
function envelopeOfSize(bytes: number, bookId: string): string {
  const message = { ...orderPlaced(bookId, 1), padding: '' };
  const base = JSON.stringify(message).length;
  return JSON.stringify({ ...message, padding: 'x'.repeat(bytes - base) });
}

/** Request limits: too large is 413, a media type no parser accepts is 415; both problems, nothing recorded. */
describe('limits', () => {
  let database: TestDatabaseHandle;
  let app: FastifyInstance;
  let bookId: string;

  before(async () => {
    database = await testDatabases[0]!.open();
    app = await testApp(database, { config: { inboxPruneIntervalMs: 0 } });
    bookId = await seedBook(app, 10);
  });
  after(async () => {
    await app?.close();
    await database?.close();
  });

  for (const url of COMMAND_URLS) {
    test(`POST ${url} with a body over 64 KiB: 413 payload-too-large, nothing recorded`, async () => {
      const counts = await tableCounts(database.db);
      const body = envelopeOfSize(BODY_LIMIT_BYTES + 1, bookId);
      assert.equal(Buffer.byteLength(body), 64 * 1024 + 1);
      const res = await app.inject({ method: 'POST', url, headers: { 'content-type': 'application/json' }, payload: body });
      assertProblem(res, 413, 'payload-too-large');
      assert.deepEqual(await tableCounts(database.db), counts);
    });

    test(`POST ${url} as text/plain: 415 unsupported-media-type, nothing recorded`, async () => {
      const counts = await tableCounts(database.db);
      const res = await app.inject({
        method: 'POST',
        url,
        headers: { 'content-type': 'text/plain' },
        payload: JSON.stringify(orderPlaced(bookId, 1)),
      });
      assertProblem(res, 415, 'unsupported-media-type');
      assert.deepEqual(await tableCounts(database.db), counts);
    });
  }

  test('exactly 64 KiB is within the limit: the body is read (and then refused by the schema, not the size)', async () => {
    const body = envelopeOfSize(BODY_LIMIT_BYTES, bookId);
    assert.equal(Buffer.byteLength(body), 64 * 1024);
    const res = await app.inject({
      method: 'POST',
      url: '/inventory/order-placed',
      headers: { 'content-type': 'application/json' },
      payload: body,
    });
    assertProblem(res, 400, 'invalid-request');
  });

  for (const type of ['application/xml', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x']) {
    test(`a command as ${type.split(';')[0]}: 415`, async () => {
      const res = await app.inject({ method: 'POST', url: '/inventory/order-placed', headers: { 'content-type': type }, payload: 'a=1' });
      assertProblem(res, 415, 'unsupported-media-type');
    });
  }

  test('admin routes have the same limits: PUT /stock over 64 KiB is 413, as text/plain 415', async () => {
    const tooLarge = await app.inject({
      method: 'PUT',
      url: `/stock/${newId()}`,
      headers: { ...admin, 'content-type': 'application/json' },
      payload: JSON.stringify({ title: 'x'.repeat(BODY_LIMIT_BYTES), onHand: 1 }),
    });
    assertProblem(tooLarge, 413, 'payload-too-large');
    const wrongType = await app.inject({
      method: 'PUT',
      url: `/stock/${newId()}`,
      headers: { ...admin, 'content-type': 'text/plain' },
      payload: 'title=Dune',
    });
    assertProblem(wrongType, 415, 'unsupported-media-type');
  });

  test('refused commands are counted as rejected', async () => {
    const before = sample(await scrape(app), 'inbox_commands_total', { consumer: 'inventory.reserve-stock', result: 'rejected' }) ?? 0;
    const res = await app.inject({
      method: 'POST',
      url: '/inventory/order-placed',
      headers: { 'content-type': 'text/plain' },
      payload: 'x',
    });
    assert.equal(res.statusCode, 415);
    const after = sample(await scrape(app), 'inbox_commands_total', { consumer: 'inventory.reserve-stock', result: 'rejected' }) ?? 0;
    assert.equal(after - before, 1);
  });
});

/** What a raw connection received before the server closed it. */
async function untilClosed(port: number, send: (write: (text: string) => void) => () => void): Promise<string> {
  const socket = connect({ host: '127.0.0.1', port });
  const chunks: Buffer[] = [];
  socket.on('data', (chunk: Buffer) => chunks.push(chunk));
  let stop = () => {};
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', () => {
      stop = send((text) => {
        if (socket.writable) socket.write(text);
      });
    });
    socket.once('close', () => resolve());
    socket.once('error', (error: NodeJS.ErrnoException) => (error.code === 'ECONNRESET' ? undefined : reject(error)));
  });
  stop();
  return Buffer.concat(chunks).toString('utf8');
}

/** Writes `text` a character at a time, one every `everyMs`; returns the stop function. */
function trickle(write: (text: string) => void, text: string, everyMs: number): () => void {
  let at = 0;
  const timer = setInterval(() => {
    if (at < text.length) write(text[at++]!);
  }, everyMs);
  return () => clearInterval(timer);
}

/** A client slower than HTTP_REQUEST_TIMEOUT_MS / HTTP_HEADERS_TIMEOUT_MS gets a 408 problem and loses the connection. */
describe('slow clients', { timeout: 30_000 }, () => {
  let database: TestDatabaseHandle;
  let app: FastifyInstance;
  let port: number;
  let bookId: string;

  before(async () => {
    database = await testDatabases[0]!.open();
    app = await testApp(database, { config: { inboxPruneIntervalMs: 0, httpRequestTimeoutMs: 400, httpHeadersTimeoutMs: 200 } });
    await app.listen({ host: '127.0.0.1', port: 0 });
    port = (app.server.address() as AddressInfo).port;
    bookId = await seedBook(app, 10);
  });
  after(async () => {
    await app?.close();
    await database?.close();
  });

  /** Asserts a 408 request-timeout problem with Connection: close. */
  function assertTimedOut(answer: string): void {
    const [head = '', body = ''] = answer.split('\r\n\r\n');
    assert.match(head, /^HTTP\/1\.1 408 /, answer);
    assert.match(head, /\r\ncontent-type: application\/problem\+json/i);
    assert.match(head, /\r\nconnection: close/i);
    const problem = JSON.parse(body) as Problem;
    assert.equal(problem.type, '/problems/request-timeout');
    assert.equal(problem.status, 408);
  }

  test('a body trickled slower than the request timeout: 408 problem, connection closed, nothing recorded', async () => {
    const counts = await tableCounts(database.db);
    const body = JSON.stringify(orderPlaced(bookId, 1));
    const answer = await untilClosed(port, (write) => {
      write(`POST /inventory/order-placed HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n`);
      write(`Content-Length: ${Buffer.byteLength(body)}\r\n\r\n`);
      return trickle(write, body, 50);
    });
    assertTimedOut(answer);
    assert.deepEqual(await tableCounts(database.db), counts);
  });

  test('headers trickled slower than the headers timeout: 408 problem, connection closed', async () => {
    const answer = await untilClosed(port, (write) => trickle(write, `GET /stock/${bookId} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`, 50));
    assertTimedOut(answer);
  });

  test('a request that arrives within the timeouts is answered as usual', async () => {
    const res = await fetch(`http://127.0.0.1:${port}/stock/${bookId}`);
    assert.equal(res.status, 200);
  });
});
