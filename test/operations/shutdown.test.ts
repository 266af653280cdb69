import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'kysely';
import type { DatabaseHandle } from '../../src/schema/create-database.js';
import { reportMissingDatabases, serverDatabases, testDatabases, type TestDatabaseHandle } from '../support/databases.js';
import { ADMIN_TOKEN, inboxRows, orderPlaced, reservedOf, seedBook, testApp, type Problem } from '../support/fixtures.js';
import { eventually } from '../support/observe.js';
import { postJson, seamServers, type ServerProcess } from '../support/server-process.js';

/** Sessions of this test database inside an open transaction that is waiting (the held claim). */
async function heldTransactions(database: DatabaseHandle): Promise<number> {
  const query =
    database.kind === 'mysql'
      ? sql<{ n: number | string }>`
    select count(*) as n from information_schema.innodb_trx t
    join information_schema.processlist p on p.id = t.trx_mysql_thread_id
    where p.db = database() and p.command = 'Sleep'`
      : sql<{ n: number | string }>`
    select count(*) as n from pg_stat_activity
    where datname = current_database() and state like 'idle in transaction%'`;
  const { rows } = await query.execute(database.db);
  return Number(rows[0]?.n ?? 0);
}

/**
 * True once the service refuses new connections: a fresh TCP connection to its port is refused
 * (ECONNREFUSED, nothing listens any more). A connection accepted means it still listens. Anything
 * else (no answer within 5 s, another error) is neither, and fails the test with what it was.
 */
async function refusesConnections(baseUrl: string): Promise<boolean> {
  const socket = connect(Number(new URL(baseUrl).port), '127.0.0.1');
  try {
    const outcome = await new Promise<'accepted' | 'timeout' | NodeJS.ErrnoException>((resolve) => {
      const timer = setTimeout(() => resolve('timeout'), 5000);
      socket.once('connect', () => resolve('accepted'));
      socket.once('error', (error) => resolve(error));
      socket.once('close', () => clearTimeout(timer));
    });
    if (outcome === 'accepted') return false;
    if (outcome !== 'timeout' && outcome.code === 'ECONNREFUSED') return true;
    throw new Error(`expected a refused or an accepted connection, got ${outcome === 'timeout' ? 'no answer in 5 s' : String(outcome)}`);
  } finally {
    socket.destroy();
  }
}

/**
 * SIGTERM while a command's transaction is held open (test seam SEAM_HOLD_MS): the service stops
 * accepting, lets the request finish, closes the pool and exits 0. Past SHUTDOWN_GRACE_MS it exits 1
 * and the database rolls the abandoned transaction back. Either way no transaction is left open and
 * no in-progress inbox row is left behind.
 */
reportMissingDatabases((name) => `graceful shutdown on ${name}`, ['postgres', 'mysql']);

for (const target of serverDatabases.filter((d) => d.name === 'postgres' || d.name === 'mysql')) {
  describe(`graceful shutdown on ${target.name}`, { timeout: 120_000 }, () => {
    let database: TestDatabaseHandle;
    const { started: servers, start, seed } = seamServers(() => database.url, ADMIN_TOKEN);

    before(async () => {
      database = await target.open();
    });
    after(async () => {
      await Promise.all(servers.map((s) => s.stop('SIGKILL')));
      await database?.close();
    });

    /** Sends a reserve-stock command and waits until its claim transaction is open and held by the seam. */
    async function sendHeldCommand(server: ServerProcess) {
      const dune = await seed(server, 10);
      const message = orderPlaced(dune, 2);
      let answered = false;
      const pending = postJson(`${server.baseUrl}/inventory/order-placed`, message)
        .then(
          (res) => res,
          (error: unknown) => error as Error,
        )
        .finally(() => {
          answered = true;
        });
      await server.held(message.messageId);
      assert.ok(await eventually(async () => (await heldTransactions(database)) === 1), 'the claim transaction is open and held');
      return { dune, message, pending, answered: () => answered };
    }

    test('SIGTERM while a reserve-stock transaction is held: the request completes (201), new connections are refused, exit 0', async () => {
      const server = await start({ SEAM_HOLD: 'until-released' });
      const { dune, message, pending, answered } = await sendHeldCommand(server);

      const exited = once(server.child, 'exit');
      server.child.kill('SIGTERM');
      assert.ok(await eventually(() => refusesConnections(server.baseUrl)), 'after SIGTERM the service stops accepting connections');
      assert.equal(answered(), false, 'the held request is still in flight while the service refuses new connections');
      assert.equal(server.child.exitCode, null, 'the process waits for it');
      server.release();
      const answer = await pending;
      const [code] = (await exited) as [number | null];

      if (answer instanceof Error) assert.fail(`the in-flight request was answered, not cut off: ${answer.message}`);
      assert.equal(answer.status, 201);
      assert.equal(answer.body?.outcome?.result, 'reserved');
      assert.equal(code, 0, `exit code; logs:\n${server.logs()}`);

      const rows = await inboxRows(database.db, message.messageId);
      assert.equal(rows.length, 1);
      assert.notEqual(rows[0]!.completed_at, null, 'no in-progress row is left');
      assert.equal(await reservedOf(database.db, dune), 2);
      assert.equal(await heldTransactions(database), 0, 'no transaction left open');
    });

    test('SIGTERM with a request held past SHUTDOWN_GRACE_MS: exit 1, the request fails cleanly, its transaction is rolled back', async () => {
      // Held until released, and never released: only the grace period can end it.
      const server = await start({ SEAM_HOLD: 'until-released', SHUTDOWN_GRACE_MS: '300' });
      const { dune, message, pending } = await sendHeldCommand(server);

      const exited = once(server.child, 'exit');
      server.child.kill('SIGTERM');
      const [code] = (await exited) as [number | null];
      const answer = await pending;

      assert.equal(code, 1, 'the grace period ran out');
      if (answer instanceof Error) {
        assert.ok(answer instanceof TypeError, `a connection error: ${String(answer)}`);
      } else {
        assert.ok(answer.status >= 500, `a server error, got ${answer.status}`);
      }
      assert.ok(await eventually(async () => (await heldTransactions(database)) === 0), 'the server ended the abandoned session');
      assert.deepEqual(await inboxRows(database.db, message.messageId), [], 'rolled back: no inbox row, in progress or otherwise');
      assert.equal(await reservedOf(database.db, dune), 0, 'rolled back: no stock change');
    });
  });
}

/**
 * A request that reaches the service after closing began (its headers were still arriving on an open
 * connection) is refused with a 503 problem and Retry-After, while the request already in flight
 * finishes and commits.
 */
describe('a request arriving while the service closes', () => {
  test('gets a 503 shutting-down problem; the in-flight command still commits', async () => {
    const database = await testDatabases[0]!.open();
    let held!: () => void;
    const isHeld = new Promise<void>((resolve) => (held = resolve));
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const app = await testApp(database, {
      testHooks: {
        beforeCommit: async () => {
          held();
          await released;
        },
      },
    });
    try {
      const book = await seedBook(app, 10);
      const address = await app.listen({ port: 0, host: '127.0.0.1' });
      const inFlight = postJson(`${address}/inventory/order-placed`, orderPlaced(book, 2));
      await isHeld;

      const socket = connect(Number(new URL(address).port), '127.0.0.1');
      await once(socket, 'connect');
      let answer = '';
      socket.on('data', (chunk: Buffer) => {
        answer += chunk.toString();
      });
      socket.write('GET /stock HTTP/1.1\r\nHost: localhost\r\n');
      // The server has both connections (the held command's and this half-sent request's).
      const connections = () => new Promise<number>((resolve, reject) => app.server.getConnections((e, n) => (e ? reject(e) : resolve(n))));
      assert.ok(await eventually(async () => (await connections()) === 2), 'the server holds both connections');
      const closing = app.close();
      // Closing has begun once the server stops listening.
      assert.ok(await eventually(() => !app.server.listening), 'the server stopped listening');
      socket.write('\r\n');
      await Promise.race([once(socket, 'close'), sleep(15_000)]);
      release();

      const [head = '', body = ''] = answer.split('\r\n\r\n');
      assert.match(head, /^HTTP\/1\.1 503/);
      assert.match(head, /content-type: application\/problem\+json/i);
      assert.match(head, /retry-after: 1/i);
      assert.equal((JSON.parse(body) as Problem).type, '/problems/shutting-down');
      const first = await inFlight;
      assert.equal(first.status, 201);
      await closing;
      assert.equal(await reservedOf(database.db, book), 2);
    } finally {
      await app.close();
      await database.close();
    }
  });
});
