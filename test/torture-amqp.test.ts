import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { describe, test } from 'node:test';
import { postgresUrl } from './support/databases.js';
import { mysqlUrl, skipUnlessMysql } from './support/mysql-databases.js';
import { runTorture } from './support/torture-run.js';

/**
 * The CI variant of the AMQP torture run (scripts/torture/index.ts --amqp --short): orders with duplicates in
 * through RabbitMQ, two service processes killed with kill -9 several times, the broker (a throwaway
 * node of the run's own) restarted once; then every order reserved exactly once, every reservation's
 * event published, distinct event ids equal to reservations. Needs TEST_POSTGRES_URL and Debian's
 * rabbitmq-server; with REQUIRE_AMQP=1 a missing broker install fails instead of skipping. The same run again on
 * the MariaDB/MySQL of TEST_MYSQL_URL (skipped without it; REQUIRE_MYSQL=1 fails instead).
 */

const rabbitInstalled = existsSync('/usr/lib/rabbitmq/bin/rabbitmq-server');
if (process.env.REQUIRE_AMQP === '1' && !rabbitInstalled) {
  throw new Error('REQUIRE_AMQP=1 but rabbitmq-server is not installed: the AMQP torture run would be skipped');
}
const noBroker = rabbitInstalled ? false : "Debian's rabbitmq-server is not installed";
const skip = postgresUrl === undefined ? 'TEST_POSTGRES_URL is not set' : noBroker;
const skipMysql = skipUnlessMysql() || noBroker;

interface TortureResult {
  mode: string;
  variant: string;
  orders: number;
  crashes: number;
  brokerRestarts: number;
  unexpectedExits: number;
  violations: number;
}

/** Asserts what every short AMQP run must show, whatever the database. */
function assertSurvived(result: TortureResult): void {
  assert.equal(result.mode, 'amqp');
  assert.equal(result.violations, 0);
  assert.ok(result.crashes >= 3, 'service processes were killed with kill -9');
  assert.equal(result.brokerRestarts, 1, 'RabbitMQ was restarted');
  assert.equal(result.unexpectedExits, 0);
  assert.ok(result.orders >= 100);
}

const TITLE = 'orders through RabbitMQ survive kill -9 and a broker restart: reserved once, each event published, no extra events';

describe('torture run, AMQP mode, short variant', { skip }, () => {
  test(TITLE, { timeout: 240_000 }, async (t) => {
    assertSurvived((await runTorture(t, ['--amqp', '--short'], postgresUrl)) as unknown as TortureResult);
  });
});

describe('torture run, AMQP mode, short variant, on MariaDB/MySQL', { skip: skipMysql }, () => {
  test(TITLE, { timeout: 240_000 }, async (t) => {
    assertSurvived((await runTorture(t, ['--amqp', '--short'], mysqlUrl)) as unknown as TortureResult);
  });
});
