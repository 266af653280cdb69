import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { FastifyInstance } from 'fastify';
import { postgresUrl, testDatabases, type TestDatabaseHandle } from '../support/databases.js';
import { ADMIN_TOKEN, json, newId, orderPlaced, testApp, type Problem } from '../support/fixtures.js';
import { eventually } from '../support/observe.js';
import { postJson, startServer, type ServerProcess } from '../support/server-process.js';

const script = fileURLToPath(new URL('../../scripts/pg-throwaway.sh', import.meta.url));
const run = promisify(execFile);

/** Runs scripts/pg-throwaway.sh; returns what it printed (the URL, for start). */
async function pgThrowaway(command: 'start' | 'pause' | 'resume' | 'stop', dir: string): Promise<string> {
  const { stdout } = await run('bash', [script, command, dir], { timeout: 120_000 });
  return stdout.trim();
}

/** GETs a health endpoint: its body is { status: 'ok' } or problem details. */
async function get(url: string): Promise<{ status: number; body: { status: string } | Problem | undefined; headers: Headers }> {
  const res = await fetch(url, { signal: AbortSignal.timeout(15_000) });
  const text = await res.text();
  return { status: res.status, body: text === '' ? undefined : (JSON.parse(text) as { status: string } | Problem), headers: res.headers };
}

describe('health on PGlite (in process)', () => {
  let database: TestDatabaseHandle;
  let app: FastifyInstance;

  before(async () => {
    database = await testDatabases[0]!.open();
    app = await testApp(database, { config: { inboxPruneIntervalMs: 0 } });
  });
  after(async () => {
    await app?.close();
    await database?.close();
  });

  test('GET /health/live and /health/ready: 200 { status: ok }', async () => {
    for (const url of ['/health/live', '/health/ready', '/health/ready']) {
      const res = await app.inject({ url });
      assert.equal(res.statusCode, 200, url);
      assert.deepEqual(json(res), { status: 'ok' });
    }
  });

  test('with the database closed, ready is a 503 problem and live stays 200', async () => {
    const own = await testDatabases[0]!.open();
    const closing = await testApp(own, { config: { inboxPruneIntervalMs: 0 } });
    try {
      await own.close();
      const ready = await closing.inject({ url: '/health/ready' });
      assert.equal(ready.statusCode, 503);
      assert.match(String(ready.headers['content-type']), /^application\/problem\+json/);
      assert.equal(json<Problem>(ready).type, '/problems/database-unavailable');
      assert.equal(ready.headers['retry-after'], '2');
      assert.equal((await closing.inject({ url: '/health/live' })).statusCode, 200);
    } finally {
      await closing.close();
    }
  });
});

/**
 * A real outage: the service runs in its own process on its own PostgreSQL cluster; the cluster is
 * stopped and started again underneath it. Same process throughout, no restart.
 */
describe(
  'readiness on PostgreSQL across a server stop and start',
  { skip: postgresUrl ? false : 'TEST_POSTGRES_URL is not set', timeout: 240_000 },
  () => {
    let dir: string;
    let databaseUrl: string;
    let server: ServerProcess | undefined;

    before(async () => {
      // Short: the cluster's unix socket lives in this directory.
      dir = await mkdtemp(join(tmpdir(), 'pgr-'));
      databaseUrl = await pgThrowaway('start', dir);
      server = await startServer({ DATABASE_URL: databaseUrl, ADMIN_TOKEN, INBOX_PRUNE_INTERVAL_MS: '0' });
    });
    after(async () => {
      await server?.stop();
      if (dir !== undefined) await pgThrowaway('stop', dir);
    });

    test('ready 200 -> database stopped: 503 problem (live 200, commands 503) -> database started: 200 and commands work', async () => {
      const base = server!.baseUrl;
      const pid = server!.child.pid;
      const book = newId();
      const seed = await fetch(`${base}/stock/${book}`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${ADMIN_TOKEN}` },
        body: JSON.stringify({ title: 'Dune', onHand: 10 }),
      });
      assert.equal(seed.status, 201);
      assert.equal((await get(`${base}/health/ready`)).status, 200);

      await pgThrowaway('pause', dir);

      const down = await get(`${base}/health/ready`);
      assert.equal(down.status, 503);
      assert.match(String(down.headers.get('content-type')), /^application\/problem\+json/);
      assert.equal((down.body as Problem | undefined)?.type, '/problems/database-unavailable');
      assert.equal(down.headers.get('retry-after'), '2');
      assert.doesNotMatch(JSON.stringify(down.body), /127\.0\.0\.1|ECONNREFUSED/, 'no driver internals in the open endpoint');
      assert.equal((await get(`${base}/health/live`)).status, 200, 'the process is up: live stays 200');
      const message = orderPlaced(book, 2);
      const refused = await postJson(`${base}/inventory/order-placed`, message);
      assert.equal(refused.status, 503);
      assert.equal(refused.body?.type, '/problems/database-unavailable');

      await pgThrowaway('resume', dir);

      // pg_ctl start -w returns once the server accepts connections; the pool may still hold
      // connections that the stop ended. Wait for the state itself (ready), bounded in probes and time.
      let ready = await get(`${base}/health/ready`);
      await eventually(async () => (ready = await get(`${base}/health/ready`)).status === 200, {
        tries: 300,
        timeoutMs: 60_000,
        pauseMs: 100,
      });
      assert.equal(ready.status, 200, 'ready again without a restart');
      assert.deepEqual(ready.body, { status: 'ok' });
      assert.equal(server!.child.pid, pid);
      assert.equal(server!.child.exitCode, null, 'the same process, still running');

      const processed = await postJson(`${base}/inventory/order-placed`, message);
      assert.equal(processed.status, 201, 'the command refused during the outage recorded nothing: its retry is processed');
      assert.equal(processed.body?.outcome?.result, 'reserved');
    });
  },
);
