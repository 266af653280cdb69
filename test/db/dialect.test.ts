import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  DummyDriver,
  Kysely,
  MssqlAdapter,
  MssqlIntrospector,
  MssqlQueryCompiler,
  MysqlDialect,
  PostgresDialect,
  SqliteAdapter,
  SqliteIntrospector,
  SqliteQueryCompiler,
} from 'kysely';
import { createPool } from 'mysql2';
import pg from 'pg';
import * as tarn from 'tarn';
import * as tedious from 'tedious';
import { createDatabase } from '../../src/schema/create-database.js';
import type { Database } from '../../src/schema/database.js';
import {
  databaseFailureOf,
  DeferredWrites,
  isConnectionFailure,
  isDatabaseBusy,
  isDeadlock,
  isLockTimeout,
  isPoolExhausted,
  isUniqueViolation,
  MariadbDialect,
  retryOnceIfDeadlocked,
  telemetryOf,
} from '../../src/db/dialect.js';
import { MSSQL_APPLOCK_TIMEOUT, MSSQL_KEY_COLLATION, mssql } from '../../src/db/engines/mssql.js';
import { postgres } from '../../src/db/engines/postgres.js';
import { engineOf, UnknownEngineError } from '../../src/db/engines/registry.js';

const dialectOf = (db: Parameters<typeof engineOf>[0]): string => engineOf(db).name;

/** Error classification and dialect detection: the pure half of src/db/dialect.ts. */

function mssqlCompileOnly(): Kysely<Database> {
  return new Kysely<Database>({
    dialect: {
      createAdapter: () => new MssqlAdapter(),
      createDriver: () => new DummyDriver(),
      createIntrospector: (db) => new MssqlIntrospector(db),
      createQueryCompiler: () => new MssqlQueryCompiler(),
    },
  });
}

/** A tedious RequestError as the server reports it: `number` is the SQL Server message number. */
function requestError(number: number, message = `server error ${number}`): tedious.RequestError {
  return Object.assign(new tedious.RequestError(message, 'EREQUEST'), { number, state: 1, class: 14 });
}

/** What Kysely's MSSQL driver rejects with when tedious reports several errors for one request. */
function asKyselyArray(...errors: unknown[]): unknown[] {
  return errors;
}

describe('engineOf', () => {
  test('says mssql for a Kysely instance built on the SQL Server adapter', () => {
    assert.equal(dialectOf(mssqlCompileOnly()), 'mssql');
  });

  test('says mssql inside a transaction and for a subclass of the adapter', async () => {
    class ServiceAdapter extends MssqlAdapter {}
    const db = new Kysely<Database>({
      dialect: {
        createAdapter: () => new ServiceAdapter(),
        createDriver: () => new DummyDriver(),
        createIntrospector: (k) => new MssqlIntrospector(k),
        createQueryCompiler: () => new MssqlQueryCompiler(),
      },
    });
    assert.equal(dialectOf(db), 'mssql');
    await db.transaction().execute(async (trx) => assert.equal(dialectOf(trx), 'mssql'));
  });

  test('says postgres for a PostgresDialect (pg pool, never connected)', async () => {
    const pool = new pg.Pool({ host: '127.0.0.1', port: 1 });
    const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
    try {
      assert.equal(dialectOf(db), 'postgres');
    } finally {
      await db.destroy();
    }
  });

  test('says postgres for the embedded PGlite database', async () => {
    const handle = await createDatabase('pglite:memory', { lockTimeoutMs: 5000 });
    try {
      assert.equal(handle.kind, 'pglite');
      assert.equal(dialectOf(handle.db), 'postgres');
    } finally {
      await handle.close();
    }
  });

  test('tells MariaDB from MySQL by the dialect the opener picked: telemetry says mariadb or mysql, the SQL is the same', async () => {
    const pool = createPool({ host: '127.0.0.1', port: 1 });
    const mariadb = new Kysely<Database>({ dialect: new MariadbDialect({ pool }) });
    const mysql = new Kysely<Database>({ dialect: new MysqlDialect({ pool }) });
    try {
      assert.deepEqual(telemetryOf(mariadb), { systemName: 'mariadb', system: 'mariadb' });
      assert.deepEqual(telemetryOf(mysql), { systemName: 'mysql', system: 'mysql' });
      assert.equal(dialectOf(mariadb), 'mysql');
      assert.equal(dialectOf(mysql), 'mysql');
      const query = (db: Kysely<Database>) => db.selectFrom('outbox').select('id').where('consumer', '=', 'c').limit(1).compile().sql;
      assert.equal(query(mariadb), query(mysql));
    } finally {
      await new Promise<void>((resolve) => pool.end(() => resolve()));
    }
  });

  test('refuses a Kysely instance of an engine it does not know, rather than taking it for PostgreSQL', () => {
    const db = new Kysely<Database>({
      dialect: {
        createAdapter: () => new SqliteAdapter(),
        createDriver: () => new DummyDriver(),
        createIntrospector: (k) => new SqliteIntrospector(k),
        createQueryCompiler: () => new SqliteQueryCompiler(),
      },
    });
    assert.throws(() => engineOf(db), UnknownEngineError);
    assert.throws(() => new DeferredWrites(db), /no database engine for Kysely's SqliteAdapter/);
  });
});

describe('isUniqueViolation', () => {
  const aggregate = (...errors: unknown[]) => new AggregateError(errors, 'several errors');

  for (const [label, error] of [
    ['SQLSTATE 23505 (PostgreSQL, PGlite)', { code: '23505' }],
    ['SQL Server 2627 (primary key / unique constraint)', { number: 2627 }],
    ['SQL Server 2601 (unique index)', { number: 2601 }],
    ['a real tedious RequestError 2627', requestError(2627)],
    ['an array of tedious errors (Kysely MSSQL driver)', asKyselyArray(requestError(2627), { number: 3621 })],
    ['an array holding 2601', [{ number: 2601 }]],
    ['an AggregateError of tedious errors', aggregate(requestError(2601), { number: 3621 })],
    ['an AggregateError nested in an array', [aggregate({ number: 2627 })]],
  ] as const) {
    test(`true for ${label}`, () => assert.equal(isUniqueViolation(error), true));
  }

  for (const [label, error] of [
    ['SQL Server 547 (foreign key / check)', { number: 547 }],
    ['SQLSTATE 23503 (foreign key)', { code: '23503' }],
    ['SQLSTATE 23514 (check)', { code: '23514' }],
    ['a plain Error', new Error('duplicate key value violates unique constraint')],
    ['an array of unrelated errors', [{ number: 547 }, { number: 3621 }]],
    ['the number as a string', { number: '2627' }],
    ['the code as a number', { code: 23505 }],
    ['null', null],
    ['undefined', undefined],
    ['a string', '23505'],
  ] as const) {
    test(`false for ${label}`, () => assert.equal(isUniqueViolation(error), false));
  }
});

describe('isLockTimeout', () => {
  for (const [label, error] of [
    ['SQL Server 1222', { number: 1222 }],
    ['an array holding 1222', [{ number: 1222 }]],
    ['a real tedious RequestError 1222', requestError(1222, 'Lock request time out period exceeded.')],
    ['an AggregateError holding 1222', new AggregateError([requestError(1222)])],
    ['SQLSTATE 55P03', { code: '55P03' }],
  ] as const) {
    test(`true for ${label}`, () => assert.equal(isLockTimeout(error), true));
  }
  for (const [label, error] of [
    ['SQL Server 1205 (deadlock victim)', { number: 1205 }],
    ['SQL Server 2627', { number: 2627 }],
    ['SQLSTATE 57014 (statement timeout)', { code: '57014' }],
    ['SQLSTATE 23505', { code: '23505' }],
    ['a plain Error', new Error('Lock request time out period exceeded.')],
    ['an empty array', []],
    ['null', null],
  ] as const) {
    test(`false for ${label}`, () => assert.equal(isLockTimeout(error), false));
  }
});

describe('isConnectionFailure', () => {
  const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
  for (const [label, error] of [
    ['ECONNREFUSED (node socket)', refused],
    ['ESOCKET (tedious ConnectionError)', new tedious.ConnectionError('Failed to connect to db:1433 - connect ECONNREFUSED', 'ESOCKET')],
    ['ETIMEOUT (tedious connect timeout)', new tedious.ConnectionError('Failed to connect to db:1433 in 2000ms', 'ETIMEOUT')],
    [
      'ECLOSE (tedious: connection dropped under a request)',
      new tedious.RequestError('Connection closed before request completed.', 'ECLOSE'),
    ],
    [
      'EINVALIDSTATE (tedious: request on a dead connection)',
      new tedious.RequestError('Requests can only be made in the LoggedIn state, not the Final state', 'EINVALIDSTATE'),
    ],
    ['ELOGIN (tedious)', new tedious.ConnectionError('Login failed.', 'ELOGIN')],
    // The pool's acquire timeout keeps only the message of the last failed connect, not its code.
    [
      'a tarn acquire timeout after failed connects',
      new tarn.TimeoutError('Failed to connect to 127.0.0.1:1 - connect ECONNREFUSED 127.0.0.1:1'),
    ],
    ["Kysely's MSSQL driver when the socket ends during login", new Error('The connection ended without ever completing the connection')],
    [
      'an array holding a socket error (Kysely MSSQL driver)',
      [new tedious.ConnectionError('Connection lost - read ECONNRESET', 'ESOCKET')],
    ],
    ['SQLSTATE 57P01 (admin shutdown)', { code: '57P01' }],
    ['SQLSTATE 08006 (connection failure)', { code: '08006' }],
    ['pg: Connection terminated unexpectedly', new Error('Connection terminated unexpectedly')],
    ['a wrapper whose cause is ECONNREFUSED', new Error('query failed', { cause: refused })],
  ] as const) {
    test(`true for ${label}`, () => assert.equal(isConnectionFailure(error), true));
  }
  for (const [label, error] of [
    ['SQLSTATE 23505', { code: '23505' }],
    ['SQLSTATE 55P03', { code: '55P03' }],
    ['SQL Server 2627', requestError(2627)],
    ['SQL Server 1222', requestError(1222)],
    ['a plain Error', new Error('boom')],
    ['a message that merely mentions "Failed to connect to" mid-sentence', new Error('upstream said: Failed to connect to x')],
    // A full pool is overload, not an outage: the operator scales or sheds load, not restarts the database.
    [
      'a tarn acquire timeout with no failed connect (every connection busy)',
      new tarn.TimeoutError('operation timed out for an unknown reason'),
    ],
    ['pg-pool: timeout exceeded when trying to connect (queued behind a full pool)', new Error('timeout exceeded when trying to connect')],
    ['null', null],
  ] as const) {
    test(`false for ${label}`, () => assert.equal(isConnectionFailure(error), false));
  }
});

describe('isPoolExhausted', () => {
  for (const [label, error] of [
    ['tarn: operation timed out for an unknown reason', new tarn.TimeoutError('operation timed out for an unknown reason')],
    ['pg-pool: timeout exceeded when trying to connect', new Error('timeout exceeded when trying to connect')],
    ['an array holding it (Kysely MSSQL driver)', [new tarn.TimeoutError('operation timed out for an unknown reason')]],
  ] as const) {
    test(`true for ${label}`, () => assert.equal(isPoolExhausted(error), true));
  }
  for (const [label, error] of [
    [
      'a tarn acquire timeout that repeats a failed connect',
      new tarn.TimeoutError('Failed to connect to 127.0.0.1:1 - connect ECONNREFUSED 127.0.0.1:1'),
    ],
    ['pg: Connection terminated due to connection timeout', new Error('Connection terminated due to connection timeout')],
    ['ECONNREFUSED', Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' })],
    ['null', null],
  ] as const) {
    test(`false for ${label}`, () => assert.equal(isPoolExhausted(error), false));
  }
});

describe('isDeadlock, isDatabaseBusy and retryOnceIfDeadlocked', () => {
  test('SQL Server 1205 and SQLSTATE 40P01 are deadlocks; busy means a deadlock or a lock timeout', () => {
    assert.equal(isDeadlock(requestError(1205)), true);
    assert.equal(isDeadlock([requestError(1205)]), true);
    assert.equal(isDeadlock({ code: '40P01' }), true);
    assert.equal(isDeadlock(requestError(1222)), false);
    assert.equal(isDatabaseBusy(requestError(1222)), true);
    assert.equal(isDatabaseBusy({ code: '55P03' }), true);
    assert.equal(isDatabaseBusy(requestError(1205)), true);
    assert.equal(isDatabaseBusy(requestError(2627)), false);
    assert.equal(isDatabaseBusy(new Error('boom')), false);
  });

  test('a deadlock victim is run once more; a second deadlock, a lock timeout or another error is not retried', async () => {
    let calls = 0;
    assert.equal(await retryOnceIfDeadlocked(async () => (++calls === 1 ? Promise.reject(requestError(1205)) : 'read')), 'read');
    assert.equal(calls, 2);
    for (const error of [requestError(1222), new Error('boom')]) {
      calls = 0;
      await assert.rejects(
        retryOnceIfDeadlocked(async () => {
          calls++;
          throw error;
        }),
        (e: unknown) => e === error,
      );
      assert.equal(calls, 1, `${String(error)} is not retried`);
    }
    calls = 0;
    await assert.rejects(
      retryOnceIfDeadlocked(async () => {
        calls++;
        throw requestError(1205);
      }),
    );
    assert.equal(calls, 2, 'retried once, not forever');
  });
});

describe("the engines' column types", () => {
  test('SQL Server: uniqueidentifier, datetimeoffset(3), nvarchar(max), binary-collated nvarchar keys', () => {
    const t = mssql.ddl;
    assert.equal(t.uuid, 'uniqueidentifier');
    assert.equal(t.timestamp, 'datetimeoffset(3)');
    assert.equal(t.json, 'nvarchar(max)');
    assert.equal(t.key(200), `nvarchar(200) collate ${MSSQL_KEY_COLLATION}`);
    assert.equal(t.text(300), 'nvarchar(600)', '300 characters may be 600 UTF-16 code units');
    assert.match(MSSQL_KEY_COLLATION, /_BIN2$/, 'keys compare byte for byte, never case-insensitively');
  });

  test('PostgreSQL: uuid, timestamptz(3), jsonb, varchar', () => {
    const t = postgres.ddl;
    assert.deepEqual(
      [t.uuid, t.timestamp, t.json, t.key(200), t.text(300)],
      ['uuid', 'timestamptz(3)', 'jsonb', 'varchar(200)', 'varchar(300)'],
    );
  });
});

describe('databaseFailureOf: each driver error in the service words, whichever engine raised it', () => {
  const cases: [string, unknown, string | undefined][] = [
    ['PostgreSQL unique violation', { code: '23505' }, 'duplicate'],
    ['SQL Server duplicate key (2627)', requestError(2627), 'duplicate'],
    ['PostgreSQL lock timeout', { code: '55P03' }, 'lock-timeout'],
    ['SQL Server lock timeout (1222)', requestError(1222), 'lock-timeout'],
    ['a key lock refused by sp_getapplock (51222)', requestError(MSSQL_APPLOCK_TIMEOUT), 'lock-timeout'],
    ['PostgreSQL deadlock', { code: '40P01' }, 'deadlock'],
    ['SQL Server deadlock victim (1205) in an array', asKyselyArray(requestError(1205)), 'deadlock'],
    ['PostgreSQL serialization failure', { code: '40001' }, 'serialization-conflict'],
    ['PostgreSQL read-only transaction (a demoted primary)', { code: '25006' }, 'read-only'],
    ['PostgreSQL admin shutdown', { code: '57P01' }, 'connection-lost'],
    ['tedious socket error', { code: 'ESOCKET' }, 'connection-lost'],
    ['a connection error wrapped as a cause', new Error('query failed', { cause: { code: 'ECONNRESET' } }), 'connection-lost'],
    ['pg-pool full', new Error('timeout exceeded when trying to connect'), 'busy'],
    ['tarn full', new Error('operation timed out for an unknown reason'), 'busy'],
    ['a check constraint', { code: '23514' }, undefined],
    ['an error of the work itself', new Error('stock item vanished'), undefined],
  ];
  for (const [label, error, kind] of cases) {
    test(`${label}: ${kind ?? 'not a database failure'}`, () => {
      assert.equal(databaseFailureOf(error)?.kind, kind);
    });
  }

  test('a lock timeout beside a lost connection answers as the lock timeout (database-busy, as before)', () => {
    assert.equal(databaseFailureOf([requestError(1222), { code: 'ECLOSE' }])?.kind, 'lock-timeout');
  });
});
