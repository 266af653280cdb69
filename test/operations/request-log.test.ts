import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { testDatabases, type TestDatabaseHandle } from '../support/databases.js';
import { newId, orderPlaced, placeOrder, seedBook, testApp } from '../support/fixtures.js';
import { captureLogs, type LogLine } from '../support/logs.js';

const INFO = 30;
const EMAIL_ADDRESS = 'grace.hopper@example.org';

/** The service's logs: one line per request, JSON, never a payload or an email address at info. */
describe('request log', () => {
  let database: TestDatabaseHandle;
  let app: FastifyInstance;
  let emailDir: string;
  const { stream, raw, lines } = captureLogs();

  before(async () => {
    database = await testDatabases[0]!.open();
    emailDir = await mkdtemp(join(tmpdir(), 'emails-'));
    app = await testApp(database, {
      logger: { level: 'info', stream },
      config: { inboxPruneIntervalMs: 0, emailProvider: 'log', emailLogFile: join(emailDir, 'emails.jsonl') },
    });
  });
  after(async () => {
    await app?.close();
    await database?.close();
    await rm(emailDir, { recursive: true, force: true });
  });

  /** The lines logged for the request whose command line names this messageId. */
  function linesOfRequest(messageId: string): LogLine[] {
    const command = lines().find((l) => l.msg === 'command' && l.messageId === messageId);
    assert.ok(command, `a command line for ${messageId}`);
    return lines().filter((l) => l.reqId === command.reqId);
  }

  test('one info line per command: consumer, messageId, key source, result, status, duration', async () => {
    const dune = await seedBook(app, 10);
    const message = orderPlaced(dune, 2);
    const headers = { 'idempotency-key': message.messageId };
    assert.equal((await placeOrder(app, { data: message.data }, headers)).statusCode, 201);
    assert.equal((await placeOrder(app, { data: message.data }, headers)).statusCode, 200);

    const commandLines = lines().filter((l) => l.msg === 'command' && l.messageId === message.messageId);
    assert.equal(commandLines.length, 2, 'one line per request');
    const [first, second] = commandLines;
    assert.equal(first!.level, INFO);
    assert.equal(first!.consumer, 'inventory.reserve-stock');
    assert.equal(first!.keySource, 'idempotency-key');
    assert.equal(first!.result, 'processed');
    assert.equal(first!.status, 201);
    assert.equal(typeof first!.durationMs, 'number');
    assert.equal(second!.result, 'duplicate');
    assert.equal(second!.status, 200);
    assert.equal(lines().filter((l) => l.reqId === first!.reqId).length, 1, 'no other line for the request');
  });

  test('a refused command is one line with its problem type', async () => {
    const messageId = `m-${newId()}`;
    const res = await placeOrder(app, { messageId, data: { orderId: 'not-a-uuid', bookId: newId(), quantity: 1 } });
    assert.equal(res.statusCode, 400);
    const mine = lines().filter((l) => l.msg === 'command' && l.messageId === undefined && l.problem === '/problems/invalid-request');
    assert.ok(mine.length >= 1);
    const line = mine.at(-1)!;
    assert.equal(line.result, 'rejected');
    assert.equal(line.status, 400);
    assert.equal(lines().filter((l) => l.reqId === line.reqId && l.level >= INFO).length, 1, 'one line at info or above');
  });

  test('the email command logs no address and no payload at info', async () => {
    const messageId = `email-${newId()}`;
    const orderId = newId();
    const res = await app.inject({
      method: 'POST',
      url: '/notifications/stock-reserved-email',
      payload: { messageId, data: { orderId, bookId: newId(), quantity: 1, email: EMAIL_ADDRESS } },
    });
    assert.equal(res.statusCode, 201, res.body);
    const request = linesOfRequest(messageId);
    assert.equal(request.filter((l) => l.msg === 'command').length, 1);
    for (const line of raw) {
      const parsed = JSON.parse(line) as LogLine;
      if (parsed.level > INFO) continue;
      assert.ok(!line.includes(EMAIL_ADDRESS), `an email address at info: ${line}`);
      assert.ok(!line.includes(orderId), `payload data at info: ${line}`);
    }
  });

  test('health probes and scrapes stay out of the info log', async () => {
    const before = raw.length;
    for (const url of ['/health/live', '/health/ready', '/metrics']) assert.equal((await app.inject({ url })).statusCode, 200);
    assert.deepEqual(
      lines()
        .slice(before)
        .filter((l) => l.level >= INFO),
      [],
    );
  });
});
