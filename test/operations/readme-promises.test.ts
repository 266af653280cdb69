import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance } from 'fastify';
import { reportMissingDatabases, testDatabases, type TestDatabaseHandle } from '../support/databases.js';
import { FakeEmailProvider } from '../support/fake-email-provider.js';
import {
  admin,
  cancelOrder,
  inboxRows,
  json,
  newId,
  orderPlaced,
  placeOrder,
  reservedOf,
  seedBook,
  testApp,
  type Problem,
  type CommandAnswer,
} from '../support/fixtures.js';
import { captureLogs, type LogLine } from '../support/logs.js';
import { eventually } from '../support/observe.js';
import { sample, scrape } from './prometheus.js';

/** What the README promises that the other test files do not show; each test names its sentence. */

const EMAIL = 'notifications.stock-reserved-email';
const WARN = 40;
const ADDRESS = 'katherine.johnson@example.org';

reportMissingDatabases((name) => `keys that differ only in case, on ${name}`);
for (const target of testDatabases) {
  describe(`keys that differ only in case, on ${target.name}`, () => {
    let database: TestDatabaseHandle;
    let app: FastifyInstance;
    before(async () => {
      database = await target.open();
      app = await testApp(database, { config: { inboxPruneIntervalMs: 0 } });
    });
    after(async () => {
      await app?.close();
      await database?.close();
    });

    test('"Order-7" and "order-7" are two messages: both processed (201), two inbox rows, two reservations', async () => {
      const dune = await seedBook(app, 10);
      const suffix = newId();
      const upper = orderPlaced(dune, 2, `Order-${suffix}`);
      const lower = orderPlaced(dune, 3, `order-${suffix}`);
      const a = await placeOrder(app, upper);
      const b = await placeOrder(app, lower);
      assert.equal(a.statusCode, 201, a.body);
      assert.equal(b.statusCode, 201, 'not a duplicate, and not a 422 for a "reused" key');
      assert.equal(json<CommandAnswer>(b).messageId, lower.messageId);
      assert.equal((await inboxRows(database.db, upper.messageId)).length, 1);
      assert.equal((await inboxRows(database.db, lower.messageId)).length, 1);
      assert.equal(await reservedOf(database.db, dune), 5);
      assert.equal((await placeOrder(app, upper)).statusCode, 200, 'each replays under its own spelling');
      assert.equal((await placeOrder(app, lower)).statusCode, 200);
    });
  });
}

describe('logs, the log email provider and the counters (PGlite, in process)', () => {
  const target = testDatabases[0]!;
  let database: TestDatabaseHandle;
  let dir: string;
  const logs = captureLogs();
  const provider = new FakeEmailProvider(false);
  let crashAfterSend = false;
  let offsetMs = 0;
  let logApp: FastifyInstance;
  let httpApp: FastifyInstance;

  before(async () => {
    database = await target.open();
    dir = await mkdtemp(join(tmpdir(), 'promises-'));
    // trace: the most the service can log; nothing below may carry a payload.
    logApp = await testApp(database, {
      logger: { level: 'trace', stream: logs.stream },
      config: { inboxPruneIntervalMs: 0, emailProvider: 'log', emailLogFile: join(dir, 'emails.jsonl') },
    });
    httpApp = await testApp(database, {
      logger: { level: 'trace', stream: logs.stream },
      now: () => new Date(Date.now() + offsetMs),
      config: { inboxPruneIntervalMs: 0, emailProvider: 'http', emailProviderUrl: await provider.start(), inboxLeaseMs: 30_000 },
      testHooks: {
        afterSideEffect: async () => {
          if (crashAfterSend) throw new Error('injected crash after the email was sent');
        },
      },
    });
  });
  after(async () => {
    await logApp?.close();
    await httpApp?.close();
    await provider.stop();
    await database?.close();
    await rm(dir, { recursive: true, force: true });
  });

  const sendEmail = (app: FastifyInstance, message: unknown) =>
    app.inject({ method: 'POST', url: '/notifications/stock-reserved-email', payload: message as object });
  const emailMessage = (messageId = `mail-${newId()}`) => ({
    messageId,
    data: { orderId: newId(), bookId: newId(), quantity: 2, email: ADDRESS },
  });

  test('EMAIL_PROVIDER=log appends one JSON line per email to EMAIL_LOG_FILE, with the downstream key; a duplicate adds none', async () => {
    const message = emailMessage();
    assert.equal((await sendEmail(logApp, message)).statusCode, 201);
    assert.equal((await sendEmail(logApp, message)).statusCode, 200);
    type EmailLine = { at: string; idempotencyKey: string; subject: string; text: string; to: string };
    const lines = (await readFile(join(dir, 'emails.jsonl'), 'utf8'))
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as EmailLine);
    const mine = lines.filter((l) => l.idempotencyKey === `${EMAIL}:${message.messageId}`);
    assert.equal(mine.length, 1);
    const email = mine[0]!;
    assert.deepEqual(Object.keys(email).sort(), ['at', 'idempotencyKey', 'subject', 'text', 'to']);
    assert.equal(email.to, ADDRESS);
    assert.match(email.subject, new RegExp(message.data.orderId));
    assert.ok(!Number.isNaN(Date.parse(email.at)));
  });

  test('a 422 is logged as a warning (consumer, key, both fingerprints, dead letter) and counted', async () => {
    const dune = await seedBook(logApp, 10);
    const message = orderPlaced(dune, 2);
    assert.equal((await placeOrder(logApp, message)).statusCode, 201);
    const before =
      sample(await scrape(logApp), 'inbox_commands_total', { consumer: 'inventory.reserve-stock', result: 'fingerprint-mismatch' }) ?? 0;
    const refused = await placeOrder(logApp, { ...message, data: { ...message.data, quantity: 7 } });
    assert.equal(refused.statusCode, 422);
    const after =
      sample(await scrape(logApp), 'inbox_commands_total', { consumer: 'inventory.reserve-stock', result: 'fingerprint-mismatch' }) ?? 0;
    assert.equal(after - before, 1, 'counted');
    const warning = logs.lines().find((l) => l.level === WARN && l.messageId === message.messageId && /idempotency key reused/.test(l.msg));
    assert.ok(warning, 'a warning line for the reused key');
    assert.equal(warning.consumer, 'inventory.reserve-stock');
    assert.equal(warning.stored, json<Problem>(refused).storedFingerprint);
    assert.equal(warning.received, json<Problem>(refused).receivedFingerprint);
    assert.equal(`/dead-letters/${String(warning.deadLetter)}`, json<Problem>(refused).deadLetter);
  });

  test('in-flight, needs-reconciliation and failed are counted as they happen; a reconciliation is logged with its note', async () => {
    const count = async (result: string) => sample(await scrape(httpApp), 'inbox_commands_total', { consumer: EMAIL, result }) ?? 0;
    const message = emailMessage();
    const start = { inFlight: await count('in-flight'), needs: await count('needs-reconciliation'), failed: await count('failed') };

    crashAfterSend = true;
    assert.equal((await sendEmail(httpApp, message)).statusCode, 500, 'sent, then crashed before recording it');
    crashAfterSend = false;
    assert.equal(await count('failed'), start.failed + 1);

    assert.equal((await sendEmail(httpApp, message)).statusCode, 409, 'within the lease');
    assert.equal(await count('in-flight'), start.inFlight + 1);

    offsetMs += 31_000;
    const late = await sendEmail(httpApp, message);
    assert.equal(late.statusCode, 409);
    assert.equal(json<Problem>(late).type, '/problems/needs-reconciliation');
    assert.equal(await count('needs-reconciliation'), start.needs + 1);

    const note = `delivered per provider log ${newId()}`;
    const settled = await httpApp.inject({
      method: 'POST',
      url: `${json<Problem>(late).reconcile}`,
      headers: admin,
      payload: { resolution: 'completed', note },
    });
    assert.equal(settled.statusCode, 200, settled.body);
    const line = logs.lines().find((l) => l.note === note);
    assert.ok(line, 'the reconciliation is logged with its note');
    assert.equal(line.level, WARN);
    assert.equal(line.consumer, EMAIL);
    assert.equal(line.messageId, message.messageId);
    assert.equal(line.resolution, 'completed');
    assert.equal(provider.requests.length, 1, 'never resent');
  });

  test('payloads are never logged, at any level down to trace', async () => {
    // Everything above ran at trace; add the refusals a payload could leak through.
    const leaked = emailMessage();
    await sendEmail(logApp, leaked);
    await sendEmail(logApp, { ...leaked, data: { ...leaked.data, quantity: 9 } });
    await sendEmail(logApp, { messageId: `bad-${newId()}`, data: { ...leaked.data, email: `not an address ${leaked.data.orderId}` } });
    await logApp.inject({
      method: 'POST',
      url: '/inventory/order-placed',
      headers: { 'content-type': 'application/json' },
      payload: `{"messageId":"x","data":{"orderId":"${leaked.data.orderId}"`,
    });
    assert.ok(logs.raw.length > 20, 'the app did log at trace');
    for (const line of logs.raw) {
      assert.ok(!line.includes(ADDRESS), `an email address in the log: ${line}`);
      assert.ok(!line.includes(leaked.data.orderId), `payload data in the log: ${line}`);
      assert.ok(!line.includes(leaked.data.bookId), `payload data in the log: ${line}`);
    }
  });
});

describe('readiness while a migration is pending', () => {
  test('GET /health/ready is a 503 naming the pending migration; 200 once it is applied', async () => {
    const database = await testDatabases[0]!.open();
    const app = await testApp(database, { config: { inboxPruneIntervalMs: 0 } });
    try {
      // As if this process started against a database one migration behind: forget the newest one.
      const applied = (await database.db
        .selectFrom('kysely_migration' as never)
        .selectAll()
        .execute()) as { name: string }[];
      assert.ok(applied.length >= 1);
      const newest = applied
        .map((m) => m.name)
        .sort()
        .at(-1)!;
      await database.db
        .deleteFrom('kysely_migration' as never)
        .where('name' as never, '=', newest as never)
        .execute();
      const pending = await app.inject({ url: '/health/ready' });
      assert.equal(pending.statusCode, 503);
      assert.equal(json<Problem>(pending).type, '/problems/database-unavailable');
      assert.equal(json<Problem>(pending).detail, `migrations not applied: ${newest}`);
      assert.equal(pending.headers['retry-after'], '2');

      await database.db
        .insertInto('kysely_migration' as never)
        .values(applied.filter((m) => m.name === newest))
        .execute();
      assert.equal((await app.inject({ url: '/health/ready' })).statusCode, 200);
    } finally {
      await app.close();
      await database.close();
    }
  });
});

const serverEntry = fileURLToPath(new URL('../../src/server.ts', import.meta.url));

/** Starts src/server.ts itself (not the test seam) and returns its log lines once it listens. */
async function startUpLogs(env: Record<string, string>): Promise<LogLine[]> {
  const child = spawn(process.execPath, ['--import', 'tsx', serverEntry], {
    env: {
      ...process.env,
      PORT: '0',
      HOST: '127.0.0.1',
      DATABASE_URL: 'pglite:memory',
      LOG_LEVEL: 'info',
      INBOX_PRUNE_INTERVAL_MS: '0',
      WEBHOOK_SECRET: '',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (out += chunk.toString()));
  try {
    const listening = await eventually(() => out.includes('Server listening') || child.exitCode !== null, {
      timeoutMs: 60_000,
      pauseMs: 50,
    });
    assert.ok(listening && child.exitCode === null, `the service started:\n${out}`);
    return out
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as LogLine);
  } finally {
    child.kill('SIGTERM');
    await new Promise((resolve) => (child.exitCode !== null ? resolve(undefined) : child.once('exit', resolve)));
  }
}

describe('start-up', { timeout: 120_000 }, () => {
  test('without producer credentials the service warns that commands are unauthenticated; with WEBHOOK_SECRET, it does not', async () => {
    const unsigned = await startUpLogs({});
    const warning = unsigned.find((l) => /no producer credentials/.test(l.msg));
    assert.ok(warning, 'a start-up warning');
    assert.equal(warning.level, WARN);
    assert.match(warning.msg, /without authentication/);

    const signed = await startUpLogs({ WEBHOOK_SECRET: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw' });
    assert.ok(signed.some((l) => /Server listening/.test(l.msg)));
    assert.equal(
      signed.find((l) => /without authentication/.test(l.msg)),
      undefined,
    );
  });
});

/** The README's text, with its line breaks folded, so a sentence is found whatever its wrapping. */
async function readme(): Promise<string> {
  return readFile(new URL('../../README.md', import.meta.url), 'utf8');
}
const folded = (text: string) => text.replace(/\s+/g, ' ');

/** The fenced sh blocks of a README section: from its heading to the next heading of its level or above. */
function shBlocks(text: string, heading: string): string[] {
  const level = /^#+/.exec(heading)![0].length;
  const blocks: string[] = [];
  let inSection = false;
  let fence: string[] | undefined;
  let otherFence = false;
  for (const line of text.split('\n')) {
    if (fence !== undefined || otherFence) {
      if (line.startsWith('```')) {
        if (fence !== undefined && inSection) blocks.push(fence.join('\n'));
        fence = undefined;
        otherFence = false;
      } else fence?.push(line);
      continue;
    }
    if (line.startsWith('```sh')) fence = [];
    else if (line.startsWith('```')) otherFence = true;
    const title = /^(#+) /.exec(line);
    if (line === heading) inSection = true;
    else if (title !== null && title[1]!.length <= level) inSection = false;
  }
  assert.ok(blocks.length > 0, `the README has sh blocks under ${heading}`);
  return blocks;
}

describe('the placement of a cancelled order (PGlite, in process)', () => {
  let database: TestDatabaseHandle;
  let app: FastifyInstance;
  before(async () => {
    database = await testDatabases[0]!.open();
    app = await testApp(database);
  });
  after(async () => {
    await app?.close();
    await database?.close();
  });

  test('"after reserve → cancel, a placement of it under a new messageId answers order-cancelled", not already-reserved', async () => {
    assert.match(
      folded(await readme()),
      /after reserve → cancel, a placement of it under a new `messageId` answers `order-cancelled`/,
      'the README says so',
    );
    const dune = await seedBook(app, 10);
    const placed = orderPlaced(dune, 2);
    assert.equal(json<CommandAnswer>(await placeOrder(app, placed)).outcome.result, 'reserved');
    const cancel = await cancelOrder(app, { messageId: `cancel-${newId()}`, data: { orderId: placed.data.orderId } });
    assert.equal(json<CommandAnswer>(cancel).outcome.result, 'released');
    const again = await placeOrder(app, { ...placed, messageId: `again-${newId()}` });
    assert.equal(again.statusCode, 201);
    assert.equal(json<CommandAnswer>(again).outcome.result, 'order-cancelled');
    assert.equal(json<CommandAnswer>(again).outcome.cancelledBy, json<CommandAnswer>(cancel).messageId);
    assert.equal(await reservedOf(database.db, dune), 0, 'nothing held for the cancelled order');
  });
});

describe('the README walkthroughs and set-up, against the files they describe', () => {
  test('the RabbitMQ walkthrough publishes an order of its own, not one the curl walkthrough reserved and cancelled', async () => {
    const text = await readme();
    const curlOrders = new Set(
      [...shBlocks(text, '## The scenarios, with curl'), ...shBlocks(text, '## Where the key comes from')].flatMap((block) =>
        [...block.matchAll(/\b(O\d*)=(\S+)/g)].map((m) => m[2]!),
      ),
    );
    assert.ok(curlOrders.size >= 5, 'the curl walkthrough names its orders');
    const rabbit = shBlocks(text, '## RabbitMQ: commands in, events out').find((block) => /rabbitmqadmin .*publish/.test(block));
    assert.ok(rabbit !== undefined, 'the RabbitMQ walkthrough publishes with rabbitmqadmin');
    const used = /publish routing_key=inventory\.order-placed[\s\S]*?"orderId":"'\$(\w+)'"/.exec(rabbit)?.[1];
    assert.ok(used !== undefined, 'its payload names its order by a variable');
    const defined = new RegExp(`^${used}=(\\S+)`, 'm').exec(rabbit)?.[1];
    assert.ok(defined !== undefined, `$${used} is set in the RabbitMQ walkthrough itself`);
    assert.match(defined, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    assert.equal(curlOrders.has(defined), false, `${defined} is not an order of the curl walkthrough`);
  });

  test('rabbitmq-plugins and rabbitmqctl run as root, and the management plugin is kept on loopback before it is enabled', async () => {
    const text = await readme();
    const block = shBlocks(text, '## RabbitMQ: commands in, events out').find((b) => b.includes('rabbitmq-plugins enable'))!;
    const lines = block.split('\n');
    for (const line of lines.filter((l) => /\brabbitmq(-plugins|ctl)\b/.test(l))) assert.match(line, /^sudo /, line);
    const loopback = lines.findIndex((l) => l.includes("'management.tcp.ip = 127.0.0.1'") && l.includes('/etc/rabbitmq/rabbitmq.conf'));
    const restart = lines.findIndex((l) => /restart/.test(l));
    const enable = lines.findIndex((l) => l.includes('rabbitmq-plugins enable rabbitmq_management'));
    assert.ok(loopback !== -1 && loopback < restart && restart < enable, 'loopback set, broker restarted, then the plugin enabled');
    assert.match(folded(text), /`rabbitmq-plugins` and `rabbitmqctl` act on the broker's own node, so they run as root/);
    assert.match(folded(text), /listens on every interface \(`0\.0\.0\.0:15672`\)/);
  });

  test('"Test it" names every Debian package .ci/run installs, and the quick run leaves out what it says', async () => {
    const ci = await readFile(new URL('../../.ci/run', import.meta.url), 'utf8');
    const installed = new Set(
      [...ci.matchAll(/^\s*apt_install ([a-z0-9 -]+?)(?:\s*\|\||\s*$)/gm)].flatMap((m) => m[1]!.trim().split(/\s+/)),
    );
    assert.deepEqual([...installed].sort(), [
      'chromium',
      'docker-compose',
      'etcd-server',
      'haproxy',
      'mariadb-client',
      'mariadb-server',
      'nginx-light',
      'patroni',
      'postgresql',
      'prometheus',
      'rabbitmq-server',
    ]);
    const testIt = folded(await readme())
      .split('## Test it')[1]!
      .split('### Node versions')[0]!;
    for (const name of installed) assert.ok(testIt.includes(`\`${name}\``), `"Test it" names ${name}`);
    assert.match(testIt, /npm run test:quick/);

    const scripts = (
      JSON.parse(await readFile(new URL('../../package.json', import.meta.url), 'utf8')) as { scripts: Record<string, string> }
    ).scripts;
    const files = /\$\((find [^)]*)\)/.exec(scripts['test:quick']!)![1]!;
    const root = fileURLToPath(new URL('../../', import.meta.url));
    const quick = await new Promise<string[]>((resolve, reject) => {
      const child = spawn('sh', ['-c', files], { cwd: root });
      let out = '';
      child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
      child.on('error', reject).on('exit', () => resolve(out.split('\n').filter((l) => l !== '')));
    });
    assert.ok(
      quick.includes('test/routes/bad-input.test.ts') && quick.includes('test/inbox/concurrency.test.ts'),
      'unit and PostgreSQL tests',
    );
    assert.deepEqual(
      quick.filter((f) => /\.browser\.test\.ts$|torture|^test\/package\//.test(f)),
      [],
      'no browser, torture, failover or package test',
    );
    const every = await new Promise<string[]>((resolve, reject) => {
      const child = spawn('sh', ['-c', /\$\((find [^)]*)\)/.exec(scripts.test!)![1]!], { cwd: root });
      let out = '';
      child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
      child.on('error', reject).on('exit', () => resolve(out.split('\n').filter((l) => l !== '')));
    });
    const left = every.filter((f) => !quick.includes(f));
    assert.match(testIt, new RegExp(`npm test minus ${left.length} files: browser, torture, package`), left.join(' '));
  });

  test('"Node versions" says what the packages themselves require', async () => {
    const text = folded(await readme())
      .split('### Node versions')[1]!
      .split('### Benchmark')[0]!;
    const engines = async (name: string) =>
      (
        JSON.parse(await readFile(new URL(`../../node_modules/${name}/package.json`, import.meta.url), 'utf8')) as {
          engines: { node: string };
        }
      ).engines.node;
    assert.equal(await engines('@stoplight/prism-cli'), '>=24.18.0');
    assert.match(text, /Stoplight Prism[^.]*24\.18/);
    assert.equal(await engines('kysely'), '>=22.0.0');
    assert.match(text, /kysely 0\.29 declares Node 22/);
    assert.equal(await engines('@opentelemetry/sdk-trace'), '>=22.15.0');
    assert.match(text, /OpenTelemetry SDK[^.]*22\.15/);
    assert.equal(await engines('dependency-cruiser'), '^22||^24||>=26');
    assert.match(text, /dependency-cruiser[^.]*22/);
  });
});
