import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import pg from 'pg';
import { buildApp } from '../../src/app.js';
import type { SeamMessage } from '../../src/plugins/test-seams.js';
import { postgresDatabase, postgresUrl, skipUnlessPostgres, testDatabases, type TestDatabaseHandle } from '../support/databases.js';
import { ADMIN_TOKEN, json, newId, orderPlaced, placeOrder, seedBook, testApp, type Problem } from '../support/fixtures.js';
import { captureLogs, type LogLine } from '../support/logs.js';
import { eventually } from '../support/observe.js';

const INFO = 30;
const WARN = 40;
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

/** Overload under a clock the test moves: how many lines a burst of turned-away requests writes. */
describe('request log under overload', () => {
  let database: TestDatabaseHandle;
  let app: FastifyInstance;
  let clock = new Date('2030-01-01T00:00:00.000Z');
  const { stream, raw, lines } = captureLogs();
  const blockerId = `blocker-${newId()}`;
  let reached = false;
  let release: () => void = () => {};
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });

  before(async () => {
    database = await testDatabases[0]!.open();
    app = await testApp(database, {
      logger: { level: 'info', stream },
      now: () => clock,
      config: { inboxPruneIntervalMs: 0, inboxBatchConcurrency: 1, inboxQueueLimit: 1 },
      testHooks: {
        beforeCommit: async (message: SeamMessage) => {
          if (message.messageId !== blockerId) return;
          reached = true;
          await released;
        },
      },
    });
  });
  after(async () => {
    release();
    await app?.close();
    await database?.close();
  });

  test('a burst of overloaded 503s: one warn line a second without a stack, the next one counts those left out', async () => {
    const book = await seedBook(app, 100);
    const from = raw.length;
    const blocker = placeOrder(app, orderPlaced(book, 1, blockerId));
    assert.ok(await eventually(() => reached), 'the blocking transaction is held');
    const queued = placeOrder(app, orderPlaced(book, 1));
    assert.ok(await eventually(() => app.commands.queued === 1), 'one command queued behind it');

    const burst = 25;
    const shed: LightMyRequestResponse[] = [];
    for (let i = 0; i < burst; i++) shed.push(await placeOrder(app, orderPlaced(book, 1)));
    clock = new Date(clock.getTime() + 1000);
    shed.push(await placeOrder(app, orderPlaced(book, 1)));
    release();
    assert.equal((await blocker).statusCode, 201);
    assert.equal((await queued).statusCode, 201);
    for (const answer of shed) {
      assert.equal(answer.statusCode, 503);
      assert.equal(json<Problem>(answer).type, '/problems/overloaded');
    }

    const mine = lines().slice(from);
    assert.deepEqual(
      mine.filter((l) => l.level > WARN),
      [],
      'no error line for an expected 503',
    );
    const overloaded = mine.filter((l) => l.problem === '/problems/overloaded');
    assert.equal(overloaded.length, 2, `${burst + 1} overloaded answers, one line per second of them`);
    for (const line of overloaded) {
      assert.equal(line.level, WARN);
      assert.equal(line.msg, 'command');
      assert.equal(line.status, 503);
      assert.equal(line.stack, undefined);
      assert.equal(line.err, undefined);
    }
    assert.equal(overloaded[0]!.suppressed, undefined);
    assert.equal(overloaded[1]!.suppressed, burst - 1, 'the line after the window counts the ones left out');
  });
});

describe('the log line of a failed idle database connection', { skip: skipUnlessPostgres }, () => {
  test('names the error, not the driver client or its secret key', async () => {
    const database = await postgresDatabase!.open();
    const { stream, raw, lines } = captureLogs();
    // Opened by the service itself, as in production: a database passed in has no pool-error listener.
    const app = await buildApp({
      logger: { level: 'info', stream },
      config: { databaseUrl: database.url, adminToken: ADMIN_TOKEN, webhookSecret: undefined, inboxPruneIntervalMs: 0, amqpUrl: undefined },
    });
    try {
      await app.ready();
      const admin = new pg.Client({ connectionString: postgresUrl });
      await admin.connect();
      try {
        const { rows } = await admin.query<{ pid: number }>(
          `select pg_terminate_backend(pid) as pid from pg_stat_activity where datname = $1 and state = 'idle'`,
          [new URL(database.url).pathname.slice(1)],
        );
        assert.ok(rows.length >= 1, 'an idle connection of the service to terminate');
      } finally {
        await admin.end();
      }
      assert.ok(await eventually(() => lines().some((l) => l.msg === 'idle database connection failed')), 'the failure is logged');
      const index = lines().findIndex((l) => l.msg === 'idle database connection failed');
      const line = lines()[index]!;
      const err = line.err as Record<string, unknown>;
      assert.equal(line.level, WARN);
      assert.match(String(err.message), /terminat/);
      assert.equal(err.client, undefined);
      assert.doesNotMatch(raw[index]!, /secretKey|processID|connectionParameters/);
      assert.ok(raw[index]!.length < 4096, `a short line, got ${raw[index]!.length} characters`);
    } finally {
      await app.close();
      await database.close();
    }
  });
});
