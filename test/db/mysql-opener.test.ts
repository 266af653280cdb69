import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { sql } from 'kysely';
import { createDatabase, databaseKind, DatabaseUrlError } from '../../src/schema/create-database.js';
import {
  createDatabaseStatement,
  isMariadbVersion,
  lockWaitTimeoutSeconds,
  mysqlPoolOptions,
  parseMysqlUrl,
} from '../../src/schema/mysql.js';
import { mysqlTestDatabase, skipUnlessMysql } from '../support/mysql-databases.js';

describe('MariaDB/MySQL URLs and settings', () => {
  test('mysql:// and mariadb:// name the MySQL engine', () => {
    assert.equal(databaseKind('mysql://h/db'), 'mysql');
    assert.equal(databaseKind('mariadb://h/db'), 'mysql');
  });

  test('a URL gives host, port, database, user and password; the socket path is optional', () => {
    assert.deepEqual(parseMysqlUrl('mariadb://app:p%40ss@db.internal:3307/bookstore'), {
      host: 'db.internal',
      port: 3307,
      database: 'bookstore',
      user: 'app',
      password: 'p@ss',
      socketPath: undefined,
    });
    const local = parseMysqlUrl('mysql://app@localhost/bookstore?socketPath=/run/mysqld/mysqld.sock');
    assert.equal(local.port, 3306);
    assert.equal(local.socketPath, '/run/mysqld/mysqld.sock');
    assert.deepEqual(
      { host: 'host' in mysqlPoolOptions(local, {}), socketPath: mysqlPoolOptions(local, {}).socketPath },
      { host: false, socketPath: '/run/mysqld/mysqld.sock' },
    );
  });

  test('a URL without a host or database, or a database name that needs quoting, is refused without echoing the password', () => {
    for (const url of ['mysql:///bookstore', 'mysql://h:3306/', 'mysql://u:secret@h/book;store', 'mysql://u:sec ret@h:x/db']) {
      assert.throws(
        () => parseMysqlUrl(url),
        (error: Error) => error instanceof DatabaseUrlError && !error.message.includes('secret'),
        url,
      );
    }
  });

  test('the lock wait bound is whole seconds, rounded up, at least one', () => {
    assert.deepEqual([0, 1, 999, 1000, 1001, 5000].map(lockWaitTimeoutSeconds), [1, 1, 1, 1, 2, 5]);
  });

  test('the pool reads bigint as a string and dates as UTC instants, bounded by the given limits', () => {
    const options = mysqlPoolOptions(parseMysqlUrl('mysql://u@h/db'), { poolMax: 7, connectTimeoutMs: 1234 });
    assert.equal(options.connectionLimit, 7);
    assert.equal(options.connectTimeout, 1234);
    assert.equal(options.bigNumberStrings, true);
    assert.equal(options.timezone, 'Z');
  });

  test('db:create makes the database utf8mb4 with the binary collation', () => {
    assert.equal(
      createDatabaseStatement('bookstore'),
      'CREATE DATABASE IF NOT EXISTS `bookstore` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin',
    );
  });

  test("the server's version tells MariaDB from MySQL", () => {
    assert.equal(isMariadbVersion('10.11.19-MariaDB-0+deb12u1'), true);
    assert.equal(isMariadbVersion('11.4.2-MariaDB'), true);
    assert.equal(isMariadbVersion('8.0.36'), false);
    assert.equal(isMariadbVersion('8.4.0-commercial'), false);
  });

  test('a server that does not answer fails the open itself, naming the refused connection', { timeout: 20_000 }, async () => {
    await assert.rejects(createDatabase('mysql://root@127.0.0.1:1/bookstore', { lockTimeoutMs: 1000, connectTimeoutMs: 2000 }), {
      code: 'ECONNREFUSED',
    });
  });
});

describe('MariaDB/MySQL opener, live', { skip: skipUnlessMysql(), timeout: 60_000 }, () => {
  test('every pooled session reads committed, in UTC, strictly, byte-exact, with the lock wait bound', async () => {
    const database = await mysqlTestDatabase();
    try {
      const handle = await createDatabase(database.url, { lockTimeoutMs: 1500, poolMax: 2 });
      try {
        assert.equal(handle.kind, 'mysql');
        const { rows } = await sql<Record<string, unknown>>`SELECT @@tx_isolation AS isolation, @@time_zone AS zone,
          @@sql_mode AS mode, @@innodb_lock_wait_timeout AS lockWait, @@collation_connection AS collation,
          CAST(9007199254740993 AS SIGNED) AS big, CAST('2026-01-02 03:04:05.678' AS DATETIME(3)) AS instant,
          'a' = 'A' AS caseFolded`.execute(handle.db);
        const row = rows[0]!;
        assert.equal(row.isolation, 'READ-COMMITTED');
        assert.equal(row.zone, '+00:00');
        assert.match(String(row.mode), /STRICT_TRANS_TABLES/);
        assert.equal(Number(row.lockWait), 2);
        assert.equal(row.collation, 'utf8mb4_bin');
        assert.equal(row.big, '9007199254740993');
        assert.deepEqual(row.instant, new Date('2026-01-02T03:04:05.678Z'));
        assert.equal(Number(row.caseFolded), 0, 'keys compare byte for byte');
        assert.deepEqual(handle.poolStats(), { total: 1, idle: 1, waiting: 0 });
      } finally {
        await handle.close();
      }
    } finally {
      await database.drop();
    }
  });
});
