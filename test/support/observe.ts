import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'kysely';
import type { DatabaseHandle } from '../../src/schema/create-database.js';

/**
 * Waiting for a state rather than for time: a test that must see "B is blocked on A" asks the
 * database, with a bound on both the number of probes and the time they may take.
 */

/** Polls until `check` holds, at most `tries` times and `timeoutMs` in all; returns whether it held. */
export async function eventually(
  check: () => Promise<boolean> | boolean,
  { tries = 1000, timeoutMs = 20_000, pauseMs = 20 } = {},
): Promise<boolean> {
  const deadline = performance.now() + timeoutMs;
  for (let i = 0; i < tries && performance.now() < deadline; i++) {
    if (await check()) return true;
    await sleep(pauseMs);
  }
  return false;
}

/**
 * Sessions of this database whose current statement waits on a lock another transaction holds:
 * PostgreSQL's pg_stat_activity (wait_event_type 'Lock'), SQL Server's sys.dm_exec_requests
 * (blocking_session_id set), MariaDB's and MySQL's InnoDB monitor (mysqlSessionsWaiting). PGlite runs
 * one transaction at a time: nothing ever waits there.
 */
export async function sessionsWaitingOnLocks(database: DatabaseHandle): Promise<number> {
  if (database.kind === 'pglite') return 0;
  if (database.kind === 'mysql') return mysqlSessionsWaiting(database);
  const query =
    database.kind === 'postgres'
      ? sql<{ n: number | string }>`select count(*) as n from pg_stat_activity
          where datname = current_database() and state = 'active' and wait_event_type = 'Lock'`
      : sql<{ n: number | string }>`select count(*) as n from sys.dm_exec_requests
          where database_id = db_id() and blocking_session_id <> 0`;
  const { rows } = await query.execute(database.db);
  return Number(rows[0]?.n ?? 0);
}

/**
 * Transactions in LOCK WAIT whose session uses this database, as SHOW ENGINE INNODB STATUS lists them.
 * MariaDB 10.11's information_schema.innodb_trx (and with it innodb_lock_waits) was seen to leave out a
 * transaction whose first statement is the waiting INSERT, while the monitor lists it.
 */
async function mysqlSessionsWaiting(database: DatabaseHandle): Promise<number> {
  const sessions = await sql<{ id: number | string }>`select id from information_schema.processlist where db = database()`.execute(
    database.db,
  );
  const ours = new Set(sessions.rows.map((r) => String(r.id)));
  const status = await sql<{ Status: string }>`show engine innodb status`.execute(database.db);
  const text = status.rows[0]?.Status ?? '';
  let waiting = 0;
  for (const block of text.split(/^---TRANSACTION /m).slice(1)) {
    const thread = /(?:MariaDB|MySQL) thread id (\d+)/.exec(block)?.[1];
    if (/^LOCK WAIT /m.test(block) && thread !== undefined && ours.has(thread)) waiting++;
  }
  return waiting;
}

/** Waits (bounded) until `count` sessions of the database wait on a lock; fails the test otherwise. */
export async function waitUntilBlocked(database: DatabaseHandle, count = 1, timeoutMs = 20_000): Promise<void> {
  const seen = await eventually(async () => (await sessionsWaitingOnLocks(database)) >= count, { timeoutMs });
  if (!seen) throw new Error(`no ${count} session(s) waiting on a lock within ${timeoutMs} ms`);
}
