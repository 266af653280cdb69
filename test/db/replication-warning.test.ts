import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import { createDatabase, type DatabaseHandle } from '../../src/schema/create-database.js';
import { replicationWarning } from '../../src/db/replication.js';
import { freePort } from '../../scripts/free-port.js';
import { eventually } from '../support/observe.js';
import { json, testApp } from '../support/fixtures.js';

const run = promisify(execFile);
const repoRoot = fileURLToPath(new URL('../..', import.meta.url));
const PG_BIN = '/usr/lib/postgresql/15/bin';
const asRoot = process.getuid?.() === 0;

/** Runs a PostgreSQL binary as the cluster's owner (the server refuses root). */
async function asOwner(command: string, args: string[]): Promise<void> {
  const [file, argv] = asRoot ? ['runuser', ['-u', 'postgres', '--', command, ...args]] : [command, args];
  await run(file, argv, { cwd: '/', timeout: 120_000 });
}

const skip = !existsSync(`${PG_BIN}/pg_basebackup`) ? 'needs PostgreSQL 15 server binaries (Debian postgresql-15)' : false;

/**
 * A real primary (scripts/pg-throwaway.sh) with a real streaming standby (pg_basebackup -R): while the
 * standby is asynchronous the service warns (the ready probe's detail; server.ts logs the same at
 * start-up), and once it is synchronous (synchronous_standby_names) the warning is gone.
 */
describe('the warning for a primary whose standbys are all asynchronous', { skip }, () => {
  let primaryDir: string;
  let standbyDir: string;
  let primaryUrl: string;
  let database: DatabaseHandle;
  let app: FastifyInstance;

  before(async () => {
    primaryDir = mkdtempSync(join(tmpdir(), 'repl-primary-'));
    const script = join(repoRoot, 'scripts', 'pg-throwaway.sh');
    primaryUrl = (await run(script, ['start', primaryDir], { timeout: 120_000 })).stdout.trim();
    const port = readFileSync(join(primaryDir, 'port'), 'utf8').trim();
    standbyDir = mkdtempSync(join(tmpdir(), 'repl-standby-'));
    if (asRoot) await run('chown', ['postgres:', standbyDir]);
    const data = join(standbyDir, 'data');
    await asOwner(`${PG_BIN}/pg_basebackup`, ['-h', '127.0.0.1', '-p', port, '-U', 'postgres', '-D', data, '-R', '-X', 'stream']);
    const standbyPort = await freePort();
    await asOwner(`${PG_BIN}/pg_ctl`, [
      'start',
      '-w',
      '-t',
      '60',
      '-D',
      data,
      '-l',
      join(standbyDir, 'postgres.log'),
      '-o',
      // A standby needs at least the primary's max_connections (pg-throwaway.sh sets 200).
      `-h 127.0.0.1 -p ${standbyPort} -k ${standbyDir} -c max_connections=200`,
    ]);
    database = await createDatabase(primaryUrl, { lockTimeoutMs: 5000, poolMax: 2 });
    app = await testApp({ ...database, url: primaryUrl });
  });
  after(async () => {
    await app?.close();
    if (standbyDir !== undefined) {
      await asOwner(`${PG_BIN}/pg_ctl`, ['stop', '-m', 'immediate', '-w', '-D', join(standbyDir, 'data')]).catch(() => {});
      rmSync(standbyDir, { recursive: true, force: true });
    }
    if (primaryDir !== undefined) await run(join(repoRoot, 'scripts', 'pg-throwaway.sh'), ['stop', primaryDir]).catch(() => {});
  });

  async function admin(statement: string): Promise<void> {
    const client = new pg.Client({ connectionString: primaryUrl });
    await client.connect();
    try {
      await client.query(statement);
    } finally {
      await client.end();
    }
  }

  test('an asynchronous standby: the ready probe is 200 with a warning; a synchronous one: no warning', async () => {
    assert.ok(await eventually(async () => (await replicationWarning(database.db)) !== undefined), 'the standby streams from the primary');
    const warned = await app.inject({ method: 'GET', url: '/health/ready' });
    assert.equal(warned.statusCode, 200);
    const body = json<{ status: string; detail?: string }>(warned);
    assert.equal(body.status, 'ok');
    assert.match(body.detail ?? '', /1 standby\(s\) but none synchronous \(synchronous_standby_names is empty\)/);

    await admin(`alter system set synchronous_standby_names = '*'`);
    await admin('select pg_reload_conf()');
    assert.ok(await eventually(async () => (await replicationWarning(database.db)) === undefined));
    const ready = await app.inject({ method: 'GET', url: '/health/ready' });
    assert.equal(ready.statusCode, 200);
    assert.deepEqual(json(ready), { status: 'ok' });

    await admin(`alter system set synchronous_commit = 'local'`);
    await admin('select pg_reload_conf()');
    assert.ok(
      await eventually(async () => /synchronous_commit is local/.test((await replicationWarning(database.db)) ?? '')),
      'synchronous_commit = local waits for no standby',
    );
  });

  test('a server without standbys has nothing to warn about', async (t) => {
    const lone = mkdtempSync(join(tmpdir(), 'repl-lone-'));
    const url = (await run(join(repoRoot, 'scripts', 'pg-throwaway.sh'), ['start', lone], { timeout: 120_000 })).stdout.trim();
    t.after(() => run(join(repoRoot, 'scripts', 'pg-throwaway.sh'), ['stop', lone]));
    const db = await createDatabase(url, { lockTimeoutMs: 5000, poolMax: 1 });
    t.after(() => db.close());
    assert.equal(await replicationWarning(db.db), undefined);
  });
});
