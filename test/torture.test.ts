import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { postgresUrl } from './support/databases.js';
import { mysqlUrl, skipUnlessMysql } from './support/mysql-databases.js';
import { runTorture } from './support/torture-run.js';

/**
 * The CI variant of the torture run (scripts/torture/index.ts --short): two service processes on the
 * PostgreSQL of TEST_POSTGRES_URL, at-least-once clients, kill -9 and pg_terminate_backend at random
 * moments, then the invariants read from the database. Skipped without TEST_POSTGRES_URL; with
 * REQUIRE_POSTGRES=1 test/support/databases.ts fails the run instead. The same run again on the MariaDB/MySQL
 * of TEST_MYSQL_URL, its connections ended with KILL CONNECTION; skipped without TEST_MYSQL_URL, failed
 * instead with REQUIRE_MYSQL=1 (test/support/mysql-databases.ts).
 */

interface TortureResult {
  variant: string;
  acknowledgements: number;
  crashes: number;
  connectionKillEvents: number;
  unexpectedExits: number;
  unacknowledged: number;
  violations: number;
}

/** Asserts what every short run must show, whatever the database. */
function assertSurvived(result: TortureResult): void {
  assert.equal(result.variant, 'short');
  assert.equal(result.violations, 0);
  assert.ok(result.crashes >= 1, 'at least one service process was killed with kill -9 and restarted');
  assert.ok(result.connectionKillEvents >= 1, "at least once the service's connections were terminated");
  assert.equal(result.unexpectedExits, 0, 'no service process died on its own');
  assert.equal(result.unacknowledged, 0, 'every message was acknowledged in the end');
  assert.ok(result.acknowledgements > 100, `only ${result.acknowledgements} acknowledgements`);
}

describe('torture run, short variant', { skip: postgresUrl === undefined ? 'TEST_POSTGRES_URL is not set' : false }, () => {
  test('survives kill -9 and killed connections with no invariant violated', { timeout: 240_000 }, async (t) => {
    assertSurvived((await runTorture(t, ['--short'], postgresUrl)) as unknown as TortureResult);
  });
});

describe('torture run, short variant, on MariaDB/MySQL', { skip: skipUnlessMysql() }, () => {
  test('survives kill -9 and KILL CONNECTION with no invariant violated', { timeout: 240_000 }, async (t) => {
    assertSurvived((await runTorture(t, ['--short'], mysqlUrl)) as unknown as TortureResult);
  });
});
