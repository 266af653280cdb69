import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { describe, test } from 'node:test';
import { postgresUrl } from './support/databases.js';
import { runTorture } from './support/torture-run.js';

/**
 * The CI variant of the AMQP torture run (scripts/torture/index.ts --amqp --short): orders with duplicates in
 * through RabbitMQ, two service processes killed with kill -9 several times, the broker (a throwaway
 * node of the run's own) restarted once; then every order reserved exactly once, every reservation's
 * event published, distinct event ids equal to reservations. Needs TEST_POSTGRES_URL and Debian's
 * rabbitmq-server; with REQUIRE_AMQP=1 a missing broker install fails instead of skipping.
 */

const rabbitInstalled = existsSync('/usr/lib/rabbitmq/bin/rabbitmq-server');
if (process.env.REQUIRE_AMQP === '1' && !rabbitInstalled) {
  throw new Error('REQUIRE_AMQP=1 but rabbitmq-server is not installed: the AMQP torture run would be skipped');
}
const skip =
  postgresUrl === undefined ? 'TEST_POSTGRES_URL is not set' : !rabbitInstalled ? "Debian's rabbitmq-server is not installed" : false;

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
  test(
    'orders through RabbitMQ survive kill -9 and a broker restart: reserved once, each event published, no extra events',
    { timeout: 240_000 },
    async (t) => {
      const result = (await runTorture(t, ['--amqp', '--short'], postgresUrl)) as unknown as TortureResult;
      assert.equal(result.mode, 'amqp');
      assert.equal(result.violations, 0);
      assert.ok(result.crashes >= 3, 'service processes were killed with kill -9');
      assert.equal(result.brokerRestarts, 1, 'RabbitMQ was restarted');
      assert.equal(result.unexpectedExits, 0);
      assert.ok(result.orders >= 100);
    },
  );
});
