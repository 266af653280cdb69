import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { postgresUrl } from './support/databases.js';

/**
 * The CI variant of the AMQP torture run (scripts/torture.ts --amqp --short): orders with duplicates in
 * through RabbitMQ, two service processes killed with kill -9 several times, the broker (a throwaway
 * node of the run's own) restarted once; then every order reserved exactly once, every reservation's
 * event published, distinct event ids equal to reservations. Needs TEST_POSTGRES_URL and Debian's
 * rabbitmq-server; with REQUIRE_AMQP=1 a missing broker install fails instead of skipping.
 */

const repoRoot = fileURLToPath(new URL('..', import.meta.url));
const rabbitInstalled = existsSync('/usr/lib/rabbitmq/bin/rabbitmq-server');
if (process.env.REQUIRE_AMQP === '1' && !rabbitInstalled) {
  throw new Error('REQUIRE_AMQP=1 but rabbitmq-server is not installed: the AMQP torture run would be skipped');
}
const skip = postgresUrl === undefined ? 'TEST_POSTGRES_URL is not set' : !rabbitInstalled ? "Debian's rabbitmq-server is not installed" : false;

interface TortureResult {
  mode: string;
  variant: string;
  orders: number;
  crashes: number;
  brokerRestarts: number;
  unexpectedExits: number;
  violations: number;
}

describe('torture run, AMQP mode, short variant', { skip }, () => {
  test('orders through RabbitMQ survive kill -9 and a broker restart: reserved once, each event published, no extra events', { timeout: 240_000 }, async (t) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/torture.ts', '--amqp', '--short'], {
      cwd: repoRoot,
      env: { ...process.env, TORTURE_POSTGRES_URL: postgresUrl },
      stdio: ['ignore', 'pipe', 'pipe'],
      signal: t.signal,
    });
    let output = '';
    child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.once('close', (c) => resolve(c)));

    const summary = output.slice(output.indexOf('== torture summary'));
    for (const line of summary.split('\n').filter((l) => l !== '' && !l.startsWith('TORTURE_RESULT'))) t.diagnostic(line);
    const tail = output.split('\n').slice(-40).join('\n');
    assert.equal(code, 0, `the AMQP torture run exited ${code}:\n${tail}`);
    assert.match(summary, /^invariant violations: +0$/m, tail);
    const line = /^TORTURE_RESULT (.*)$/m.exec(output);
    assert.ok(line, `no TORTURE_RESULT line:\n${tail}`);
    const result = JSON.parse(line[1]!) as TortureResult;
    assert.equal(result.mode, 'amqp');
    assert.equal(result.violations, 0);
    assert.ok(result.crashes >= 3, 'service processes were killed with kill -9');
    assert.equal(result.brokerRestarts, 1, 'RabbitMQ was restarted');
    assert.equal(result.unexpectedExits, 0);
    assert.ok(result.orders >= 100);
  });
});
