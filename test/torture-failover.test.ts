import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { describe, test } from 'node:test';
import { runTorture } from './support/torture-run.js';

/**
 * The CI variant of the failover torture run (scripts/torture/index.ts --failover --short): HTTP and AMQP
 * load with duplicates on an own etcd, a Patroni pair of PostgreSQL 15 (synchronous_mode) behind haproxy
 * and a three-node RabbitMQ cluster with quorum queues; kill -9 of the primary, of its successor's Patroni,
 * of a RabbitMQ node, the service processes never restarted. Then no invariant violated, nothing acknowledged
 * lost, and commands processed again after every kill. Needs Debian's patroni, etcd-server, haproxy,
 * rabbitmq-server and postgresql-15; with REQUIRE_FAILOVER=1 (.ci/run) a missing one fails instead of skipping.
 */

const needed = [
  '/usr/bin/patroni',
  '/usr/bin/etcd',
  '/usr/sbin/haproxy',
  '/usr/lib/rabbitmq/bin/rabbitmq-server',
  '/usr/lib/postgresql/15/bin/initdb',
];
const missing = needed.filter((path) => !existsSync(path));
if (process.env.REQUIRE_FAILOVER === '1' && missing.length > 0) {
  throw new Error(`REQUIRE_FAILOVER=1 but ${missing.join(', ')} missing: the failover torture run would be skipped`);
}
const skip = missing.length > 0 ? `not installed: ${missing.join(', ')}` : false;

interface Kill {
  what: string;
  promotedMs?: number;
  httpRecoveryMs?: number;
  amqpRecoveryMs?: number;
}

interface FailoverResult {
  mode: string;
  replication: string;
  kills: Kill[];
  httpAcknowledgements: number;
  amqpOrders: number;
  lostHttp: number;
  lostAmqp: number;
  appliedTwice: number;
  brokerDeadLetters: number;
  unexpectedExits: number;
  violations: number;
}

describe('torture run, failover mode, short variant', { skip }, () => {
  test(
    'a failover, an orphaned primary and a lost RabbitMQ node: every acknowledged command applied exactly once, nothing lost',
    { timeout: 480_000 },
    async (t) => {
      const result = (await runTorture(t, ['--failover', '--short'], undefined)) as unknown as FailoverResult;
      assert.equal(result.mode, 'failover');
      assert.equal(result.replication, 'synchronous');
      assert.equal(result.violations, 0);
      assert.equal(result.kills.length, 3, 'the primary, its successor’s Patroni and a RabbitMQ node were killed');
      assert.ok(
        result.kills.slice(0, 2).every((k) => k.promotedMs !== undefined),
        'Patroni promoted the standby after each',
      );
      for (const k of result.kills) {
        assert.ok(k.httpRecoveryMs !== undefined && k.amqpRecoveryMs !== undefined, `commands were processed again after: ${k.what}`);
      }
      assert.equal(result.lostHttp, 0);
      assert.equal(result.lostAmqp, 0);
      assert.equal(result.appliedTwice, 0);
      assert.equal(result.brokerDeadLetters, 0);
      assert.equal(result.unexpectedExits, 0);
      assert.ok(result.httpAcknowledgements > 1000 && result.amqpOrders >= 100);
    },
  );
});
