import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { sql } from 'kysely';
import type { Connection } from 'mysql2/promise';
import { createDatabase } from '../../src/schema/create-database.js';
import { mysqlFailureKind } from '../../src/db/engines/mysql-errors.js';
import { mysqlTestDatabase, skipUnlessMysql, type MysqlTestDatabase } from '../support/mysql-databases.js';

/**
 * mysqlFailureKind on the errors a live MariaDB/MySQL really raises (TEST_MYSQL_URL): each test makes
 * the failure happen on its own fresh database, then reads what the service would make of it.
 */

/** Runs a test body on a fresh database with a table `items (id int primary key, name varchar(64))` holding rows 1 and 2. */
async function onFreshDatabase(body: (database: MysqlTestDatabase) => Promise<void>): Promise<void> {
  const database = await mysqlTestDatabase();
  try {
    const setup = await database.connect();
    try {
      await setup.query('CREATE TABLE items (id int PRIMARY KEY, name varchar(64) NOT NULL) ENGINE=InnoDB');
      await setup.query("INSERT INTO items VALUES (1, 'one'), (2, 'two')");
    } finally {
      await setup.end();
    }
    await body(database);
  } finally {
    await database.drop();
  }
}

/** The error a statement fails with; fails the test when it succeeds. */
async function failureOf(statement: Promise<unknown>): Promise<unknown> {
  try {
    await statement;
  } catch (error) {
    return error;
  }
  assert.fail('the statement succeeded');
}

async function closeAll(...connections: Connection[]): Promise<void> {
  await Promise.all(connections.map((c) => c.end().catch(() => c.destroy())));
}

describe('mysqlFailureKind on a live MariaDB/MySQL', { skip: skipUnlessMysql(), timeout: 60_000 }, () => {
  test('a second insert of the same key is a duplicate', () =>
    onFreshDatabase(async (database) => {
      const connection = await database.connect();
      try {
        const error = await failureOf(connection.query("INSERT INTO items VALUES (1, 'again')"));
        assert.equal(mysqlFailureKind(error), 'duplicate');
      } finally {
        await closeAll(connection);
      }
    }));

  test('a row lock held longer than innodb_lock_wait_timeout is a lock timeout', () =>
    onFreshDatabase(async (database) => {
      const holder = await database.connect();
      const waiter = await database.connect();
      try {
        await holder.query('START TRANSACTION');
        await holder.query("UPDATE items SET name = 'held' WHERE id = 1");
        await waiter.query('SET SESSION innodb_lock_wait_timeout = 1');
        const error = await failureOf(waiter.query("UPDATE items SET name = 'waited' WHERE id = 1"));
        assert.equal(mysqlFailureKind(error), 'lock-timeout');
        await holder.query('ROLLBACK');
      } finally {
        await closeAll(holder, waiter);
      }
    }));

  test('two transactions locking two rows in opposite order: one is a deadlock victim', () =>
    onFreshDatabase(async (database) => {
      const a = await database.connect();
      const b = await database.connect();
      try {
        await a.query('START TRANSACTION');
        await b.query('START TRANSACTION');
        await a.query("UPDATE items SET name = 'a' WHERE id = 1");
        await b.query("UPDATE items SET name = 'b' WHERE id = 2");
        const aWaits = a.query("UPDATE items SET name = 'a' WHERE id = 2");
        // Let a's statement reach the server and wait on b's lock before b closes the cycle.
        await new Promise((resolve) => setTimeout(resolve, 200));
        const outcomes = await Promise.allSettled([aWaits, b.query("UPDATE items SET name = 'b' WHERE id = 1")]);
        const victims = outcomes.filter((o) => o.status === 'rejected');
        assert.equal(victims.length, 1, 'exactly one transaction is chosen as the victim');
        assert.equal(mysqlFailureKind(victims[0]!.reason), 'deadlock');
        await Promise.all([a.query('ROLLBACK'), b.query('ROLLBACK')]);
      } finally {
        await closeAll(a, b);
      }
    }));

  test('a statement on a connection the server killed is a lost connection', () =>
    onFreshDatabase(async (database) => {
      const victim = await database.connect();
      // The killed connection reports its end as an 'error' event too; the statement's failure is what is read.
      victim.on('error', () => {});
      const killer = await database.connect();
      try {
        const [rows] = await victim.query('SELECT CONNECTION_ID() AS id');
        const id = (rows as { id: number }[])[0]!.id;
        await killer.query(`KILL CONNECTION ${Number(id)}`);
        const error = await failureOf(victim.query('SELECT name FROM items WHERE id = 1'));
        assert.equal(mysqlFailureKind(error), 'connection-lost');
      } finally {
        victim.destroy();
        await closeAll(killer);
      }
    }));

  test('a write in a READ ONLY transaction is read-only', () =>
    onFreshDatabase(async (database) => {
      const connection = await database.connect();
      try {
        await connection.query('SET SESSION TRANSACTION READ ONLY');
        const error = await failureOf(connection.query("UPDATE items SET name = 'written' WHERE id = 1"));
        assert.equal(mysqlFailureKind(error), 'read-only');
      } finally {
        await closeAll(connection);
      }
    }));

  test('a statement error of no particular kind is none of them', () =>
    onFreshDatabase(async (database) => {
      const connection = await database.connect();
      try {
        const error = await failureOf(connection.query('SELECT no_such_column FROM items'));
        assert.equal(mysqlFailureKind(error), undefined);
      } finally {
        await closeAll(connection);
      }
    }));

  test('through the opener: a duplicate still reads as one, and a full pool past the connect timeout is busy', () =>
    onFreshDatabase(async (database) => {
      const handle = await createDatabase(database.url, { lockTimeoutMs: 1000, poolMax: 1, connectTimeoutMs: 200 });
      try {
        const duplicate = await failureOf(sql`INSERT INTO items VALUES (2, 'again')`.execute(handle.db));
        assert.equal(mysqlFailureKind(duplicate), 'duplicate');
        let release!: () => void;
        const released = new Promise<void>((resolve) => (release = resolve));
        let holding!: () => void;
        const isHolding = new Promise<void>((resolve) => (holding = resolve));
        const held = handle.db.transaction().execute(async (trx) => {
          await sql`SELECT name FROM items WHERE id = 1 FOR UPDATE`.execute(trx);
          holding();
          await released;
        });
        await isHolding;
        const busy = await failureOf(sql`SELECT name FROM items WHERE id = 2`.execute(handle.db));
        assert.equal(mysqlFailureKind(busy), 'busy');
        release();
        await held;
        const { rows } = await sql<{ name: string }>`SELECT name FROM items WHERE id = 2`.execute(handle.db);
        assert.deepEqual(rows, [{ name: 'two' }], 'the pool serves again once the connection is free');
      } finally {
        await handle.close();
      }
    }));
});
