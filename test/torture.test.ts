import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { postgresUrl } from './support/databases.js';

/**
 * The CI variant of the torture run (scripts/torture.ts --short): two service processes on the
 * PostgreSQL of TEST_POSTGRES_URL, at-least-once clients, kill -9 and pg_terminate_backend at random
 * moments, then the invariants read from the database. Skipped without TEST_POSTGRES_URL; with
 * REQUIRE_POSTGRES=1 test/support/databases.ts fails the run instead.
 */

const repoRoot = fileURLToPath(new URL('..', import.meta.url));

interface TortureResult {
  variant: string;
  acknowledgements: number;
  crashes: number;
  connectionKillEvents: number;
  unexpectedExits: number;
  unacknowledged: number;
  violations: number;
}

describe('torture run, short variant', { skip: postgresUrl === undefined ? 'TEST_POSTGRES_URL is not set' : false }, () => {
  test('survives kill -9 and killed connections with no invariant violated', { timeout: 240_000 }, async (t) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/torture.ts', '--short'], {
      cwd: repoRoot,
      env: { ...process.env, TORTURE_POSTGRES_URL: postgresUrl },
      stdio: ['ignore', 'pipe', 'pipe'],
      // A cancelled test (timeout, Ctrl-C) sends SIGTERM: the driver then stops everything it started.
      signal: t.signal,
    });
    let output = '';
    child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.once('close', (c) => resolve(c)));

    const summary = output.slice(output.indexOf('== torture summary'));
    for (const line of summary.split('\n').filter((l) => l !== '' && !l.startsWith('TORTURE_RESULT'))) t.diagnostic(line);
    const tail = output.split('\n').slice(-40).join('\n');
    assert.equal(code, 0, `the torture run exited ${code}:\n${tail}`);
    assert.match(summary, /^invariant violations: +0$/m, tail);

    const line = /^TORTURE_RESULT (.*)$/m.exec(output);
    assert.ok(line, `no TORTURE_RESULT line:\n${tail}`);
    const result = JSON.parse(line[1]!) as TortureResult;
    assert.equal(result.variant, 'short');
    assert.equal(result.violations, 0);
    assert.ok(result.crashes >= 1, 'at least one service process was killed with kill -9 and restarted');
    assert.ok(result.connectionKillEvents >= 1, "at least once the service's connections were terminated");
    assert.equal(result.unexpectedExits, 0, 'no service process died on its own');
    assert.equal(result.unacknowledged, 0, 'every message was acknowledged in the end');
    assert.ok(result.acknowledgements > 100, `only ${result.acknowledgements} acknowledgements`);
  });
});
