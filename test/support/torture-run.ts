import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import type { TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';

const repoRoot = fileURLToPath(new URL('../..', import.meta.url));

/**
 * Runs `scripts/torture/index.ts` with `args` against the database server at `databaseUrl` (PostgreSQL, or
 * MariaDB/MySQL for a mysql:// or mariadb:// URL), reports its summary as test diagnostics, asserts it exited 0
 * with no invariant violated, and returns its TORTURE_RESULT record.
 */
export async function runTorture(t: TestContext, args: string[], databaseUrl: string | undefined): Promise<Record<string, unknown>> {
  const mysql = databaseUrl !== undefined && /^(mysql|mariadb):/.test(databaseUrl);
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', 'scripts/torture/index.ts', ...args, ...(mysql ? ['--database-url', databaseUrl] : [])],
    {
      cwd: repoRoot,
      env: { ...process.env, TORTURE_POSTGRES_URL: mysql ? undefined : databaseUrl },
      stdio: ['ignore', 'pipe', 'pipe'],
      // A cancelled test (timeout, Ctrl-C) sends SIGTERM: the driver then stops everything it started.
      signal: t.signal,
    },
  );
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => child.once('close', (c) => resolve(c)));

  const summary = output.slice(output.indexOf('== torture summary'));
  for (const line of summary.split('\n').filter((l) => l !== '' && !l.startsWith('TORTURE_RESULT'))) t.diagnostic(line);
  const tail = output.split('\n').slice(-40).join('\n');
  assert.equal(code, 0, `the torture run (${args.join(' ')}) exited ${code}:\n${tail}`);
  assert.match(summary, /^invariant violations: +0$/m, tail);
  const line = /^TORTURE_RESULT (.*)$/m.exec(output);
  assert.ok(line, `no TORTURE_RESULT line:\n${tail}`);
  return JSON.parse(line[1]!) as Record<string, unknown>;
}
