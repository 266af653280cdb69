import assert from 'node:assert/strict';
import { once } from 'node:events';
import net from 'node:net';
import { describe, test, type TestContext } from 'node:test';
import type { FastifyRequest } from 'fastify';
import {
  CompiledQuery,
  Kysely,
  MssqlAdapter,
  MssqlIntrospector,
  MssqlQueryCompiler,
  PostgresAdapter,
  PostgresIntrospector,
  PostgresQueryCompiler,
  sql,
  type DatabaseConnection,
  type Driver,
  type QueryResult,
} from 'kysely';
import * as tedious from 'tedious';
import { RequestTokenHandler } from 'tedious/lib/token/handler.js';
import {
  BeginTransactionEnvChangeToken,
  CommitTransactionEnvChangeToken,
  RollbackTransactionEnvChangeToken,
} from 'tedious/lib/token/token.js';
import { createDatabase, DatabasePermissionError, DatabaseUnavailableError, DatabaseUrlError } from '../../src/schema/create-database.js';
import {
  ENSURE_DATABASE_SQL,
  lockTimeoutStatement,
  MissingRowCountError,
  mssqlDialect,
  mssqlResultPlugins,
  READ_COMMITTED_SNAPSHOT_SQL,
  sessionSettingsBatch,
  parseMssqlUrl,
  tediousConfig,
} from '../../src/schema/mssql.js';
import { JSON_COLUMNS, type Database, type Tx } from '../../src/schema/database.js';
import {
  isConnectionFailure,
  isDatabaseBusy,
  isDeadlock,
  isLockTimeout,
  isPoolExhausted,
  isTransactionConflict,
  DeferredWrites,
} from '../../src/db/dialect.js';
import { MSSQL_KEY_COLLATION, MSSQL_MAX_DELETE_BATCH, ParseJsonColumnsPlugin } from '../../src/db/engines/mssql.js';
import { engineOf } from '../../src/db/engines/registry.js';

const dialectOf = (db: Parameters<typeof engineOf>[0]): string => engineOf(db).name;
import { up } from '../../src/schema/migrations/0001-initial.js';
import { up as upOrderCancellations } from '../../src/schema/migrations/0003-order-cancellations.js';
import { up as upDeadLetterDetail } from '../../src/schema/migrations/0004-dead-letter-detail.js';
import { up as upFewerWriteIndexes } from '../../src/schema/migrations/0005-fewer-write-indexes.js';
import { up as upOutboxTraceContext } from '../../src/schema/migrations/0006-outbox-trace-context.js';
import { renderError } from '../../src/http/error-handler.js';
import { insertDeadLetter, listDeadLetters } from '../../src/inbox/dead-letter.repository.js';
import { DuplicateCache } from '../../src/inbox/duplicate-cache.js';
import { GroupCommitter } from '../../src/inbox/group-commit.js';
import { claimKey, claimKeys, completeClaims, findInboxRecord, findInboxRecords } from '../../src/inbox/inbox.repository.js';
import { processOnce } from '../../src/inbox/claim.js';
import { InboxStore } from '../../src/inbox/store.js';
import { pruneCompletedInbox } from '../../src/inbox/retention.js';
import { orderPlacedCommand, RESERVE_STOCK } from '../../src/inventory/order.commands.js';
import { STOCK_RESERVED, stockEventId } from '../../src/inventory/stock-events.js';
import {
  listStockItems,
  releaseStock,
  releaseStockBatch,
  reserveStock,
  reserveStockBatch,
  setStock,
} from '../../src/inventory/stock.repository.js';
import { claimPublishableEvents, markPublished, recordPublishFailure } from '../../src/outbox/outbox.repository.js';

/**
 * SQL Server correctness by construction: there is no SQL Server here, so these tests drive the real
 * repository functions and the migration on Kysely's SQL Server compiler with a recording driver,
 * and drive Kysely's real MssqlDriver on a tedious whose network methods are replaced, to see exactly
 * which statements, batches and parameter types would reach the server.
 */

// ---------------------------------------------------------------------------------------------
// A recording driver: every statement is kept, results are scripted.
// ---------------------------------------------------------------------------------------------

interface Sent {
  sql: string;
  parameters: readonly unknown[];
}

type Reply = QueryResult<unknown> | Error | unknown[];
type Responder = (query: Sent, index: number) => Reply | undefined;

class RecordingDriver implements Driver {
  readonly sent: Sent[] = [];
  /** BEGIN/COMMIT/ROLLBACK markers interleaved with statements. */
  readonly events: string[] = [];
  constructor(private readonly respond: Responder) {}

  async init(): Promise<void> {}
  async acquireConnection(): Promise<DatabaseConnection> {
    return {
      executeQuery: async <R>(compiled: CompiledQuery): Promise<QueryResult<R>> => {
        const query = { sql: compiled.sql, parameters: compiled.parameters };
        this.sent.push(query);
        this.events.push(compiled.sql);
        const reply = this.respond(query, this.sent.length - 1) ?? { rows: [], numAffectedRows: 1n };
        // An array stands for AggregateError.errors, which Kysely's SQL Server driver rejects with:
        // eslint-disable-next-line @typescript-eslint/only-throw-error -- thrown as that driver rejects, not as an Error
        if (reply instanceof Error || Array.isArray(reply)) throw reply;
        return reply as QueryResult<R>;
      },
      streamQuery: () => {
        throw new Error('not used');
      },
    };
  }
  async beginTransaction(): Promise<void> {
    this.events.push('BEGIN');
  }
  async commitTransaction(): Promise<void> {
    this.events.push('COMMIT');
  }
  async rollbackTransaction(): Promise<void> {
    this.events.push('ROLLBACK');
  }
  async releaseConnection(): Promise<void> {}
  async destroy(): Promise<void> {}
}

function recordingDb(dialect: 'mssql' | 'postgres', respond: Responder = () => undefined) {
  const driver = new RecordingDriver(respond);
  const db = new Kysely<Database>({
    dialect:
      dialect === 'mssql'
        ? {
            createAdapter: () => new MssqlAdapter(),
            createDriver: () => driver,
            createIntrospector: (k) => new MssqlIntrospector(k),
            createQueryCompiler: () => new MssqlQueryCompiler(),
          }
        : {
            createAdapter: () => new PostgresAdapter(),
            createDriver: () => driver,
            createIntrospector: (k) => new PostgresIntrospector(k),
            createQueryCompiler: () => new PostgresQueryCompiler(),
          },
    // As openMssql builds it: the SQL Server instance parses JSON columns.
    plugins: dialect === 'mssql' ? mssqlResultPlugins() : [],
  });
  return { db, driver };
}

const affected = (n: number): QueryResult<unknown> => ({ rows: [], numAffectedRows: BigInt(n) });
const rows = (...r: Record<string, unknown>[]): QueryResult<unknown> => ({ rows: r });

/** SQL a PostgreSQL-only construct would leave in a SQL Server statement. */
const POSTGRES_ONLY: readonly [string, RegExp][] = [
  ['limit', /\blimit\b/i],
  ['offset', /\boffset\b/i],
  ['returning', /\breturning\b/i],
  ['on conflict', /\bon\s+conflict\b/i],
  [':: cast', /::/],
  ['ilike', /\bilike\b/i],
  ['true/false literal', /\b(true|false)\b/i],
  ['now()', /\bnow\s*\(/i],
  ['$n placeholder', /\$\d/],
  ['jsonb', /\bjsonb\b/i],
  ['timestamptz', /\btimestamptz\b/i],
  ['bigserial / serial', /\b(big)?serial\b/i],
  ['boolean type', /\bboolean\b/i],
  ['uuid type', /\buuid\b/i],
  ['text type', /\btext\b/i],
  ['IF NOT EXISTS', /\bif\s+not\s+exists\b/i],
];

function assertNoPostgresSyntax(statements: readonly Sent[]): void {
  for (const { sql: text } of statements) {
    for (const [name, pattern] of POSTGRES_ONLY) {
      assert.doesNotMatch(text, pattern, `PostgreSQL-only ${name} in SQL Server statement: ${text}`);
    }
  }
}

const now = new Date('2026-03-01T12:00:00.007Z');
const claim = {
  messageId: 'msg-1',
  consumer: 'inventory.reserve-stock',
  keySource: 'body' as const,
  fingerprint: 'f'.repeat(64),
  receivedAt: now,
};
const tediousUnique = (number: number) =>
  Object.assign(new tedious.RequestError(`Violation of constraint (${number})`, 'EREQUEST'), { number });
const INSERT_INBOX =
  /^insert into "inbox" \("message_id", "consumer", "key_source", "fingerprint", "received_at", "completed_at", "outcome", "lease_until"\) values \(@1, @2, @3, @4, @5, @6, @7, @8\)$/;

// ---------------------------------------------------------------------------------------------

describe('engineOf on the compile-only instances', () => {
  test('mssql for the SQL Server compiler, postgres for the PostgreSQL one', () => {
    assert.equal(dialectOf(recordingDb('mssql').db), 'mssql');
    assert.equal(dialectOf(recordingDb('postgres').db), 'postgres');
  });

  test("the service's SQL Server dialect is recognised as mssql", () => {
    const dialect = mssqlDialect(parseMssqlUrl('mssql://sa:x@127.0.0.1:1/bookstore'), { lockTimeoutMs: 5000 });
    const adapter = dialect.createAdapter();
    assert.ok(adapter instanceof MssqlAdapter, 'engineOf relies on instanceof MssqlAdapter');
  });
});

describe('claim on SQL Server', () => {
  test('claimKey sends one plain insert into "inbox", with no on-conflict clause, and reports it inserted', async () => {
    const { db, driver } = recordingDb('mssql');
    assert.equal(await claimKey(db, claim), true);
    assert.equal(driver.sent.length, 1);
    const [insert] = driver.sent;
    assert.match(insert!.sql, INSERT_INBOX);
    assert.doesNotMatch(insert!.sql, /on conflict|merge|if not exists/i);
    assert.deepEqual(insert!.parameters, ['msg-1', 'inventory.reserve-stock', 'body', 'f'.repeat(64), now, null, null, null]);
    assertNoPostgresSyntax(driver.sent);
  });

  const duplicates: [string, () => unknown][] = [
    ['a tedious error { number: 2627 }', () => tediousUnique(2627)],
    ['a tedious error { number: 2601 }', () => tediousUnique(2601)],
    [
      "an array of tedious errors (Kysely's MSSQL driver rejects with AggregateError.errors)",
      () => [tediousUnique(2627), Object.assign(new Error('The statement has been terminated.'), { number: 3621 })],
    ],
    ['an array holding 2601', () => [tediousUnique(2601)]],
    ['an AggregateError of tedious errors', () => new AggregateError([tediousUnique(2627)], 'request failed')],
    ['an AggregateError holding 2601', () => new AggregateError([tediousUnique(2601)])],
  ];
  for (const [label, make] of duplicates) {
    test(`claimKey resolves false (duplicate) when the insert fails with ${label}`, async () => {
      const { db, driver } = recordingDb('mssql', () => make() as Reply);
      assert.equal(await claimKey(db, claim), false);
      assert.equal(driver.sent.length, 1, 'a duplicate is decided by the one insert, nothing else is sent');
    });
  }

  const others: [string, () => unknown][] = [
    [
      '547 (constraint conflict)',
      () =>
        Object.assign(new tedious.RequestError('The INSERT statement conflicted with the CHECK constraint', 'EREQUEST'), { number: 547 }),
    ],
    [
      '1222 (lock timeout)',
      () => Object.assign(new tedious.RequestError('Lock request time out period exceeded.', 'EREQUEST'), { number: 1222 }),
    ],
    ['an array holding only 547', () => [Object.assign(new Error('conflict'), { number: 547 })]],
    ['a plain Error', () => new Error('socket hang up')],
  ];
  for (const [label, make] of others) {
    test(`claimKey rethrows ${label}`, async () => {
      const error = make();
      const { db } = recordingDb('mssql', () => error as Reply);
      await assert.rejects(claimKey(db, claim), (thrown) => thrown === error);
    });
  }

  test('a lost claim leaves the SQL Server transaction usable: claimKey then commit', async () => {
    const { db, driver } = recordingDb('mssql', (q) => (q.sql.startsWith('insert into "inbox"') ? tediousUnique(2627) : undefined));
    const claimed = await db.transaction().execute((trx) => claimKey(trx, claim));
    assert.equal(claimed, false);
    assert.deepEqual(
      driver.events.map((e) => e.split(' (')[0]),
      ['BEGIN', 'insert into "inbox"', 'COMMIT'],
    );
  });

  test('on PostgreSQL the same call compiles to insert ... on conflict ("message_id", "consumer") do nothing', async () => {
    const { db, driver } = recordingDb('postgres', () => affected(1));
    assert.equal(await claimKey(db, claim), true);
    assert.match(
      driver.sent[0]!.sql,
      /^insert into "inbox" \(.+\) values \(\$1, \$2, \$3, \$4, \$5, \$6, \$7, \$8\) on conflict \("message_id", "consumer"\) do nothing$/,
    );
  });

  test('on PostgreSQL zero rows inserted means duplicate, with no error to catch', async () => {
    const { db } = recordingDb('postgres', () => affected(0));
    assert.equal(await claimKey(db, claim), false);
  });

  test("completing one claim updates by the full key (the claim is this transaction's own row), at once on SQL Server", async () => {
    const { db, driver } = recordingDb('mssql', () => affected(1));
    await db.transaction().execute(async (trx) => {
      await completeClaims(new DeferredWrites(trx), trx, 'c', [{ messageId: 'msg-1', outcome: { result: 'reserved' } }], now);
      assert.equal(driver.sent.length, 1, 'the update runs when added, before any flush');
    });
    assert.equal(
      driver.sent[0]!.sql,
      'update "inbox" set "completed_at" = @1, "outcome" = @2, "lease_until" = @3 where "message_id" = @4 and "consumer" = @5',
    );
    assert.deepEqual(driver.sent[0]!.parameters, [now, '{"result":"reserved"}', null, 'msg-1', 'c']);
  });

  test('findInboxRecord reads the SQL Server text outcome back as JSON', async () => {
    const stored = {
      message_id: 'msg-1',
      consumer: 'c',
      key_source: 'body',
      fingerprint: 'f',
      received_at: now,
      completed_at: now,
      outcome: '{"result":"reserved"}',
      attempts: 1,
      lease_until: null,
    };
    const { db, driver } = recordingDb('mssql', () => rows(stored));
    const record = await findInboxRecord(db, { messageId: 'msg-1', consumer: 'c' });
    assert.deepEqual(record?.outcome, { result: 'reserved' });
    assert.equal(driver.sent[0]!.sql, 'select * from "inbox" where "message_id" = @1 and "consumer" = @2');
  });
});

describe('JSON columns on SQL Server (ParseJsonColumnsPlugin)', () => {
  const plugin = new ParseJsonColumnsPlugin(JSON_COLUMNS);
  const transform = (...r: Record<string, unknown>[]) =>
    plugin.transformResult({ queryId: { queryId: 'q' }, result: { rows: r } }).then((result) => result.rows);

  test('the JSON columns are outcome, payload and data', () => {
    assert.deepEqual([...JSON_COLUMNS].sort(), ['data', 'outcome', 'payload']);
  });

  test('parses the text of every JSON column, leaves the other columns alone', async () => {
    const [row] = await transform({
      message_id: '{"not":"json column"}',
      outcome: '{"result":"reserved","quantity":2}',
      payload: '[1,2]',
      data: '{}',
      attempts: 3,
    });
    assert.deepEqual(row, {
      message_id: '{"not":"json column"}',
      outcome: { result: 'reserved', quantity: 2 },
      payload: [1, 2],
      data: {},
      attempts: 3,
    });
  });

  test('a JSON string, number or null stored as its text reads back as that value: always parsed, never taken as text', async () => {
    const rows = await transform({ outcome: '"reserved"' }, { outcome: '42' }, { outcome: 'null' }, { outcome: '"{\\"a\\":1}"' });
    assert.deepEqual(
      rows.map((r) => r.outcome),
      ['reserved', 42, null, '{"a":1}'],
    );
  });

  test('SQL NULL and values that are not text (already parsed) pass through; rows without a JSON column are the same objects', async () => {
    const parsed = { result: 'reserved' };
    const plain = { book_id: 'b1', on_hand: 5 };
    const rows = await transform({ outcome: null }, { data: parsed }, plain);
    assert.equal(rows[0]!.outcome, null);
    assert.equal(rows[1]!.data, parsed);
    assert.equal(rows[2], plain);
  });

  test('an empty result is returned as it is; the query is not changed', async () => {
    const result = { rows: [], numAffectedRows: 3n };
    assert.equal(await plugin.transformResult({ queryId: { queryId: 'q' }, result }), result);
    const node = recordingDb('mssql').db.selectFrom('inbox').selectAll().toOperationNode();
    assert.equal(plugin.transformQuery({ queryId: { queryId: 'q' }, node }), node);
  });

  test('text that is not JSON fails, naming the column', async () => {
    await assert.rejects(transform({ payload: 'not json' }), /column payload holds text that is not JSON/);
  });

  test('installed on the SQL Server instance only: raw SQL results are parsed too, PostgreSQL results are left as the driver gave them', async () => {
    const mssql = recordingDb('mssql', () => rows({ data: '{"q":1}' }));
    const raw = await sql<{ data: unknown }>`SELECT data FROM outbox`.execute(mssql.db);
    assert.deepEqual(raw.rows, [{ data: { q: 1 } }]);
    const postgres = recordingDb('postgres', () => rows({ data: '"text"' }));
    const pgRows = await postgres.db.selectFrom('outbox').select('data').execute();
    assert.deepEqual(pgRows, [{ data: '"text"' }], 'jsonb arrives parsed from the PostgreSQL drivers: a string stays a string');
  });

  test('a dead letter payload reads back parsed through its repository', async () => {
    const letter = {
      id: '7',
      consumer: 'c',
      message_id: 'm',
      key_source: 'body',
      payload: '{"data":{"quantity":2}}',
      stored_fingerprint: 'a',
      received_fingerprint: 'b',
      reason: 'fingerprint-mismatch',
      received_at: now,
      detail: null,
    };
    const { db } = recordingDb('mssql', () => rows(letter));
    const { items } = await listDeadLetters(db, { limit: 1 });
    assert.deepEqual(items[0]?.payload, { data: { quantity: 2 } });
  });
});

describe('lock wait bound', () => {
  test('lockTimeoutStatement is SET LOCK_TIMEOUT in whole milliseconds', () => {
    assert.equal(lockTimeoutStatement(5000), 'SET LOCK_TIMEOUT 5000');
    assert.equal(lockTimeoutStatement(1500.9), 'SET LOCK_TIMEOUT 1500');
    assert.equal(lockTimeoutStatement(-3), 'SET LOCK_TIMEOUT 0', 'never -1, which would mean wait forever');
  });
});

// ---------------------------------------------------------------------------------------------

describe('migration 0001 on SQL Server', () => {
  async function ddl(dialect: 'mssql' | 'postgres'): Promise<string[]> {
    const { db, driver } = recordingDb(dialect);
    await up(db);
    return driver.sent.map((s) => s.sql.replace(/\s+/g, ' ').trim());
  }

  const column = (statement: string, name: string): string => {
    const match = new RegExp(`"?${name}"? ([a-z]+(?:\\((?:\\d+|max)\\))?(?: collate \\w+)?)`, 'i').exec(statement);
    assert.ok(match, `column ${name} in ${statement}`);
    return match[1]!;
  };

  /** Bytes a SQL Server index key column takes at most. */
  const keyBytes = (type: string): number => {
    const m = /^(n?)varchar\((\d+)\)/i.exec(type);
    assert.ok(m, `a sized string type: ${type}`);
    return Number(m[2]) * (m[1] === '' ? 1 : 2);
  };

  test('uses SQL Server types only: uniqueidentifier, datetimeoffset(3), nvarchar(max), no PostgreSQL types anywhere', async () => {
    const statements = await ddl('mssql');
    const all = statements.join('\n');
    assert.match(all, /uniqueidentifier/);
    assert.match(all, /datetimeoffset\(3\)/);
    assert.match(all, /nvarchar\(max\)/);
    assertNoPostgresSyntax(statements.map((s) => ({ sql: s, parameters: [] })));
    assert.doesNotMatch(all, /\b(jsonb|timestamptz|bigserial|serial|uuid)\b/i);
  });

  test('inbox: nonclustered composite primary key, clustered on the identity id', async () => {
    const statements = await ddl('mssql');
    const inbox = statements.find((s) => /^CREATE TABLE inbox\b/i.test(s));
    assert.ok(inbox, statements.join('\n'));
    assert.match(inbox, /\bid bigint IDENTITY\(1,1\) NOT NULL\b/);
    assert.match(inbox, /CONSTRAINT inbox_pk PRIMARY KEY NONCLUSTERED \(message_id, consumer\)/);
    assert.ok(statements.includes('CREATE UNIQUE CLUSTERED INDEX inbox_clustered ON inbox (id)'), statements.join('\n'));
    assert.equal(column(inbox, 'outcome'), 'nvarchar(max)');
    for (const c of ['received_at', 'completed_at', 'lease_until']) assert.equal(column(inbox, c), 'datetimeoffset(3)');
  });

  test('key columns are nvarchar with a binary collation: Kysely binds strings as nvarchar, and keys are case-sensitive', async () => {
    const statements = await ddl('mssql');
    const inbox = statements.find((s) => /^CREATE TABLE inbox\b/i.test(s))!;
    const deadLetters = statements.find((s) => s.startsWith('create table "dead_letters"'))!;
    const reservations = statements.find((s) => s.startsWith('create table "stock_reservations"'))!;
    const binary = `collate ${MSSQL_KEY_COLLATION}`;
    assert.equal(column(inbox, 'message_id'), `nvarchar(200) ${binary}`);
    assert.equal(column(inbox, 'consumer'), `nvarchar(100) ${binary}`);
    assert.equal(column(deadLetters, 'consumer'), `nvarchar(100) ${binary}`);
    assert.equal(column(deadLetters, 'message_id'), `nvarchar(200) ${binary}`);
    assert.equal(column(reservations, 'reserved_by'), `nvarchar(200) ${binary}`);
    assert.match(inbox, /message_id nvarchar\(200\) collate Latin1_General_100_BIN2 NOT NULL/, 'COLLATE sits between type and NOT NULL');
  });

  test("inbox's primary key stays within SQL Server's 900-byte index key limit", async () => {
    const statements = await ddl('mssql');
    const inbox = statements.find((s) => /^CREATE TABLE inbox\b/i.test(s))!;
    const bytes = keyBytes(column(inbox, 'message_id')) + keyBytes(column(inbox, 'consumer'));
    assert.equal(bytes, 600, 'nvarchar(200) + nvarchar(100)');
    assert.ok(bytes <= 900, `${bytes} bytes`);
    const deadLetters = statements.find((s) => s.startsWith('create table "dead_letters"'))!;
    assert.ok(keyBytes(column(deadLetters, 'consumer')) + 8 <= 900, 'dead_letters_consumer (consumer, id)');
  });

  test('dead_letters.id is bigint identity(1,1) primary key; check constraints and indexes are plain T-SQL', async () => {
    const statements = await ddl('mssql');
    const deadLetters = statements.find((s) => s.startsWith('create table "dead_letters"'))!;
    assert.match(deadLetters, /"id" bigint identity\(1,1\) primary key/);
    const stock = statements.find((s) => s.startsWith('create table "stock_items"'))!;
    assert.match(stock, /"book_id" uniqueidentifier primary key/);
    assert.match(stock, /constraint "stock_items_counts" check \(reserved >= 0 and reserved <= on_hand\)/);
    assert.match(stock, /"reserved" integer default 0 not null/);
    assert.match(
      statements.find((s) => s.startsWith('create table "stock_reservations"'))!,
      /constraint "stock_reservations_pk" primary key \("order_id", "book_id"\), constraint "stock_reservations_quantity" check \(quantity > 0\)/,
    );
    for (const index of [
      'inbox_completed_at',
      'inbox_received_at',
      'dead_letters_received_at',
      'dead_letters_consumer',
      'stock_reservations_book',
    ]) {
      assert.ok(
        statements.some((s) => s.startsWith(`create index "${index}" on `)),
        index,
      );
    }
  });

  test('the PostgreSQL DDL keeps its own types (the SQL Server change did not leak)', async () => {
    const all = (await ddl('postgres')).join('\n');
    assert.match(all, /"book_id" uuid primary key/);
    assert.match(all, /"message_id" varchar\(200\) not null/);
    assert.match(all, /"id" bigserial primary key/);
    assert.match(all, /"outcome" jsonb/);
    assert.doesNotMatch(all, /collate|nvarchar|uniqueidentifier|datetimeoffset/i);
  });
});

// ---------------------------------------------------------------------------------------------

describe('migration 0003 (order cancellations) on SQL Server', () => {
  async function ddl(dialect: 'mssql' | 'postgres'): Promise<string[]> {
    const { db, driver } = recordingDb(dialect);
    await upOrderCancellations(db);
    return driver.sent.map((s) => s.sql.replace(/\s+/g, ' ').trim());
  }

  test('SQL Server types only: uniqueidentifier ids, a binary-collated nvarchar message id, datetimeoffset(3)', async () => {
    const statements = await ddl('mssql');
    assert.equal(statements.length, 1, statements.join('\n'));
    assertNoPostgresSyntax(statements.map((s) => ({ sql: s, parameters: [] })));
    assert.equal(
      statements[0],
      'create table "order_cancellations" ("order_id" uniqueidentifier not null, "book_id" uniqueidentifier, ' +
        `"cancelled_by" nvarchar(200) collate ${MSSQL_KEY_COLLATION} not null, "cancelled_at" datetimeoffset(3) not null, ` +
        'constraint "order_cancellations_pk" primary key ("order_id", "cancelled_by"))',
    );
  });

  test('on PostgreSQL: uuid, varchar, timestamptz(3)', async () => {
    const [table] = await ddl('postgres');
    assert.match(
      table!,
      /"order_id" uuid not null, "book_id" uuid, "cancelled_by" varchar\(200\) not null, "cancelled_at" timestamptz\(3\) not null/,
    );
    assert.doesNotMatch(table!, /collate|nvarchar|uniqueidentifier|datetimeoffset/i);
  });
});

describe('migration 0004 (dead-letter detail) on SQL Server', () => {
  test('adds a nullable nvarchar column (room for 1,000 characters of UTF-16, as every text column) with T-SQL syntax (ADD, no COLUMN keyword); varchar on PostgreSQL', async () => {
    const mssql = recordingDb('mssql');
    await upDeadLetterDetail(mssql.db);
    assert.deepEqual(
      mssql.driver.sent.map((s) => s.sql),
      ['alter table "dead_letters" add "detail" nvarchar(2000)'],
    );
    const postgres = recordingDb('postgres');
    await upDeadLetterDetail(postgres.db);
    assert.equal(postgres.driver.sent.length, 1);
    assert.match(postgres.driver.sent[0]!.sql, /^alter table "dead_letters" add column "detail" varchar\(1000\)$/);
  });
});

describe('migration 0005 (indexes no query reads) on SQL Server', () => {
  test('drops the reservations-by-book index in T-SQL (DROP INDEX … ON table) and keeps the outbox clustered on seq; PostgreSQL also drops the unique constraint on seq', async () => {
    const mssql = recordingDb('mssql');
    await upFewerWriteIndexes(mssql.db);
    assert.deepEqual(
      mssql.driver.sent.map((s) => s.sql),
      ['drop index "stock_reservations_book" on "stock_reservations"'],
    );
    const postgres = recordingDb('postgres');
    await upFewerWriteIndexes(postgres.db);
    assert.deepEqual(
      postgres.driver.sent.map((s) => s.sql),
      ['drop index "stock_reservations_book"', 'ALTER TABLE outbox DROP CONSTRAINT outbox_seq'],
    );
  });
});

describe('migration 0006 (outbox trace context) on SQL Server', () => {
  test('adds two nullable varchar columns in T-SQL syntax (ADD, no COLUMN keyword); the same types on PostgreSQL', async () => {
    const mssql = recordingDb('mssql');
    await upOutboxTraceContext(mssql.db);
    assert.deepEqual(
      mssql.driver.sent.map((s) => s.sql),
      ['alter table "outbox" add "trace_parent" varchar(55)', 'alter table "outbox" add "trace_state" varchar(512)'],
    );
    const postgres = recordingDb('postgres');
    await upOutboxTraceContext(postgres.db);
    assert.deepEqual(
      postgres.driver.sent.map((s) => s.sql),
      ['alter table "outbox" add column "trace_parent" varchar(55)', 'alter table "outbox" add column "trace_state" varchar(512)'],
    );
  });
});

describe('domain SQL on SQL Server', () => {
  const command = {
    orderId: '6f1c1d52-3f5e-4d7c-9a49-2b1f5f0e9a10',
    bookId: '0b7e1a9e-0d0b-4f2a-8a53-7d4c1f0f2e33',
    quantity: 2,
    messageId: 'msg-1',
  };

  const LOCK_STOCK = /^SELECT \* FROM "stock_items" WITH \(UPDLOCK, ROWLOCK\)\s+WHERE "book_id" IN \(@1\) ORDER BY "book_id"$/;
  /** The order's application lock, taken before any stock row: one sp_getapplock, its return code checked. */
  const LOCK_ORDER =
    /^DECLARE @result int = 0;\nIF @result >= 0 EXEC @result = sp_getapplock @Resource = @1, @LockMode = 'Exclusive', @LockOwner = 'Transaction';\nIF @result = -1 THROW 51222, /;
  const stockItem = (onHand: number, reserved: number) =>
    rows({ book_id: command.bookId, title: 'Dune', on_hand: onHand, reserved, updated_at: now });

  test('reserveStock: the order locked (sp_getapplock) first, then the stock row (UPDLOCK), the reservations and cancellations read, one insert, one update; reserved', async () => {
    const { db, driver } = recordingDb('mssql', (q) =>
      q.sql.includes('WITH (UPDLOCK') ? stockItem(5, 1) : q.sql.startsWith('select') ? rows() : affected(1),
    );
    const outcome = await db.transaction().execute((trx) => reserveStock(trx, command, now));
    assert.equal(outcome.result, 'reserved');
    const sent = driver.sent.map((s) => s.sql);
    assert.match(sent[0]!, LOCK_ORDER, 'the order is locked first, before any stock row');
    assert.deepEqual(driver.sent[0]!.parameters, [`order:${command.orderId}`]);
    assert.match(sent[1]!, LOCK_STOCK, 'the stock row is locked before anything reads or writes a reservation');
    assert.equal(
      sent[2],
      'select "order_id", "book_id", "quantity", "reserved_by", "released_at" from "stock_reservations" where "order_id" in (@1) and "book_id" in (@2)',
    );
    assert.equal(
      sent[3],
      'select "order_id", "book_id", "cancelled_at", "cancelled_by" from "order_cancellations" where "order_id" in (@1)',
      'the cancellations are read under the same lock',
    );
    assert.equal(
      sent[4],
      'insert into "stock_reservations" ("order_id", "book_id", "quantity", "reserved_by", "reserved_at", "released_by", "released_at") values (@1, @2, @3, @4, @5, @6, @7)',
    );
    assert.equal(
      sent[5],
      'update "stock_items" set "reserved" = reserved + case "book_id" when @1 then cast(@2 as integer) end, "updated_at" = @3 where "book_id" in (@4)',
    );
    assert.equal(sent.length, 6);
    assert.deepEqual(driver.sent[5]!.parameters, [command.bookId, 2, now, command.bookId]);
    assertNoPostgresSyntax(driver.sent);
  });

  test('reserveStock: too little on the locked row -> insufficient, with the figure it was decided on; nothing written, the transaction commits', async () => {
    const { db, driver } = recordingDb('mssql', (q) =>
      q.sql.includes('WITH (UPDLOCK') ? stockItem(3, 2) : q.sql.startsWith('select') ? rows() : affected(1),
    );
    const outcome = await db.transaction().execute((trx) => reserveStock(trx, command, now));
    assert.deepEqual(outcome, {
      result: 'insufficient-stock',
      orderId: command.orderId,
      bookId: command.bookId,
      quantity: 2,
      available: 1,
    });
    assert.match(driver.sent[0]!.sql, LOCK_ORDER);
    assert.match(driver.sent[1]!.sql, LOCK_STOCK);
    assert.ok(!driver.sent.some((s) => /^(insert|update|delete)/.test(s.sql)), 'a refusal writes no reservation and no stock');
    assert.equal(driver.events.at(-1), 'COMMIT', 'a refusal is an outcome, not an error: the transaction commits');
    assertNoPostgresSyntax(driver.sent);
  });

  test('reserveStock: unknown book when the stock read finds nothing', async () => {
    const { db } = recordingDb('mssql', (q) =>
      q.sql.startsWith('update') ? affected(0) : q.sql.startsWith('select') || q.sql.startsWith('SELECT') ? rows() : affected(1),
    );
    const outcome = await db.transaction().execute((trx) => reserveStock(trx, command, now));
    assert.equal(outcome.result, 'unknown-book');
  });

  test('reserveStock: a reservation read after the lock -> already-reserved, nothing written', async () => {
    const { db, driver } = recordingDb('mssql', (q) => {
      if (q.sql.includes('WITH (UPDLOCK')) return stockItem(5, 0);
      if (q.sql.includes('"order_cancellations"')) return rows();
      if (q.sql.startsWith('select'))
        return rows({
          order_id: command.orderId,
          book_id: command.bookId,
          quantity: 5,
          reserved_by: 'msg-0',
          released_at: null,
        });
      return affected(1);
    });
    const outcome = await db.transaction().execute((trx) => reserveStock(trx, command, now));
    assert.deepEqual(outcome, {
      result: 'already-reserved',
      orderId: command.orderId,
      bookId: command.bookId,
      quantity: 2,
      existing: { quantity: 5, reservedBy: 'msg-0', released: false },
    });
    assert.ok(!driver.sent.some((s) => /^(insert|update|delete)/.test(s.sql)), 'nothing written');
    assert.deepEqual(driver.events.at(-1), 'COMMIT');
  });

  test('releaseStock: the order locked, live reservations read, their stock rows locked, read again, then the conditional update', async () => {
    const reservation = { order_id: command.orderId, book_id: command.bookId, quantity: 2 };
    const { db, driver } = recordingDb('mssql', (q) =>
      q.sql.startsWith('select') ? rows(reservation) : q.sql.includes('WITH (UPDLOCK') ? stockItem(5, 2) : affected(1),
    );
    const outcome = await db.transaction().execute((trx) => releaseStock(trx, { orderId: command.orderId, messageId: 'msg-2' }, now));
    assert.deepEqual(outcome, { result: 'released', orderId: command.orderId, released: [{ bookId: command.bookId, quantity: 2 }] });
    const live =
      'select "order_id", "book_id", "quantity" from "stock_reservations" where "order_id" in (@1) and "released_at" is null order by "book_id"';
    const sent = driver.sent.map((s) => s.sql);
    assert.match(sent[0]!, LOCK_ORDER, 'the order is locked before its reservations are read');
    assert.deepEqual(driver.sent[0]!.parameters, [`order:${command.orderId}`]);
    assert.equal(sent[1], live);
    assert.match(sent[2]!, LOCK_STOCK);
    assert.deepEqual(driver.sent[2]!.parameters, [command.bookId], 'the books found are locked before any reservation is written');
    assert.equal(sent[3], live, 'read again under the lock');
    assert.deepEqual(sent.slice(4, 6), [
      'update "stock_reservations" set "released_at" = @1, "released_by" = @2 where "order_id" = @3 and "book_id" = @4 and "released_at" is null',
      'update "stock_items" set "reserved" = reserved - @1, "updated_at" = @2 where "book_id" = @3',
    ]);
    assert.equal(
      sent[6],
      'insert into "order_cancellations" ("order_id", "book_id", "cancelled_by", "cancelled_at") values (@1, @2, @3, @4)',
      'the cancellation is recorded (a plain insert on SQL Server), after the stock it released',
    );
    assert.deepEqual(driver.sent[6]!.parameters, [command.orderId, null, 'msg-2', now]);
    assert.equal(sent.length, 7);
    assertNoPostgresSyntax(driver.sent);
  });

  test('releaseStock: a release that lost the race (0 rows) gives nothing back', async () => {
    const { db, driver } = recordingDb('mssql', (q) =>
      q.sql.startsWith('select')
        ? rows({ order_id: command.orderId, book_id: command.bookId, quantity: 2 })
        : q.sql.includes('WITH (UPDLOCK')
          ? stockItem(5, 2)
          : affected(0),
    );
    const outcome = await db.transaction().execute((trx) => releaseStock(trx, { orderId: command.orderId, messageId: 'msg-2' }, now));
    assert.deepEqual(outcome, { result: 'not-reserved', orderId: command.orderId });
    assert.ok(!driver.sent.some((s) => s.sql.startsWith('update "stock_items"')), 'no stock update after a lost release');
  });

  test('releaseStock of one book: the order, then that book is locked, then its live reservation read once', async () => {
    const { db, driver } = recordingDb('mssql', (q) =>
      q.sql.startsWith('select')
        ? rows({ order_id: command.orderId, book_id: command.bookId, quantity: 2 })
        : q.sql.includes('WITH (UPDLOCK')
          ? stockItem(5, 2)
          : affected(1),
    );
    const outcome = await db
      .transaction()
      .execute((trx) => releaseStock(trx, { orderId: command.orderId, bookId: command.bookId, messageId: 'msg-2' }, now));
    assert.equal(outcome.result, 'released');
    assert.match(driver.sent[0]!.sql, LOCK_ORDER);
    assert.match(driver.sent[1]!.sql, LOCK_STOCK);
    assert.match(driver.sent[2]!.sql, /^select "order_id", "book_id", "quantity" from "stock_reservations"/);
    assert.match(driver.sent[3]!.sql, /^update "stock_reservations"/);
  });

  test('the order lock batch: one sp_getapplock per distinct order, in order-id order, each only while the ones before were granted; a refusal raises', async () => {
    const orders = ['6f1c1d52-3f5e-4d7c-9a49-2b1f5f0e9a13', '6f1c1d52-3f5e-4d7c-9a49-2b1f5f0e9a11', '6f1c1d52-3f5e-4d7c-9a49-2b1f5f0e9a12'];
    const { db, driver } = recordingDb('mssql', (q) => (q.sql.startsWith('select') ? rows() : affected(1)));
    await db.transaction().execute((trx) =>
      releaseStockBatch(
        trx,
        [...orders, orders[0]!].map((orderId, i) => ({ orderId, messageId: `c${i}` })),
        now,
      ),
    );
    const lock = driver.sent[0]!;
    assert.deepEqual(
      lock.parameters,
      [...orders].sort().map((o) => `order:${o}`),
      'each order once, sorted: one global lock order',
    );
    const call = (n: number) =>
      `IF @result >= 0 EXEC @result = sp_getapplock @Resource = @${n}, @LockMode = 'Exclusive', @LockOwner = 'Transaction';`;
    assert.deepEqual(lock.sql.split('\n'), [
      'DECLARE @result int = 0;',
      call(1),
      call(2),
      call(3),
      "IF @result = -1 THROW 51222, N'key lock not granted within the lock timeout (sp_getapplock: -1)', 1;",
      "IF @result = -3 THROW 51205, N'key lock request chosen as deadlock victim (sp_getapplock: -3)', 1;",
      "IF @result < 0 THROW 51000, N'key lock not granted (sp_getapplock returned an error code)', 1;",
    ]);
    assert.equal(driver.sent.filter((q) => q.sql.includes('sp_getapplock')).length, 1, 'one statement locks the whole batch');
    assert.doesNotMatch(lock.sql, /@LockTimeout/, "the wait is the session's LOCK_TIMEOUT, the service's lock bound");
    assertNoPostgresSyntax(driver.sent);
  });

  test('an order lock past the lock timeout (51222 from the lock batch) is a lock timeout: nothing else sent, rolled back, 503 database-busy', async () => {
    const timedOut = Object.assign(new tedious.RequestError('a key lock was not granted within the lock timeout', 'EREQUEST'), {
      number: 51222,
    });
    const { db, driver } = recordingDb('mssql', (q) => (q.sql.includes('sp_getapplock') ? [timedOut] : undefined));
    const caught: unknown = await db
      .transaction()
      .execute((trx) => reserveStock(trx, command, now))
      .then(
        () => undefined,
        (error: unknown) => error,
      );
    assert.ok(isLockTimeout(caught) && isDatabaseBusy(caught), 'the same answer as a row lock past the bound (1222)');
    assert.equal(renderError(caught, { url: '/orders' } as FastifyRequest).body.type, '/problems/database-busy');
    assert.deepEqual(driver.events, ['BEGIN', driver.sent[0]!.sql, 'ROLLBACK'], 'no stock row locked, nothing written');
    const victim = Object.assign(new tedious.RequestError('chosen as a deadlock victim', 'EREQUEST'), { number: 51205 });
    assert.ok(isDeadlock(victim) && isTransactionConflict(victim), 'a deadlock victim (-3) is run again like 1205');
  });

  test('setStock: update, then read, then insert without on-conflict; a concurrent create (2627) falls back to the update', async () => {
    let inserts = 0;
    let updates = 0;
    const { db, driver } = recordingDb('mssql', (q) => {
      if (q.sql.startsWith('update')) return affected(updates++ === 0 ? 0 : 1);
      if (q.sql.startsWith('insert')) {
        inserts++;
        return [tediousUnique(2627)];
      }
      if (q.sql.startsWith('select "reserved"')) return rows();
      return rows({ book_id: command.bookId, title: 'Dune', on_hand: 7, reserved: 0, updated_at: now });
    });
    const result = await setStock(db, { bookId: command.bookId, title: 'Dune', onHand: 7 }, now);
    assert.equal(result.kind, 'updated');
    assert.equal(inserts, 1);
    assert.deepEqual(
      driver.events.map((e) => e.split(' where ')[0]),
      [
        'BEGIN',
        'update "stock_items" set "title" = @1, "on_hand" = @2, "updated_at" = @3',
        'select "reserved" from "stock_items"',
        'insert into "stock_items" ("book_id", "title", "on_hand", "reserved", "updated_at") values (@1, @2, @3, @4, @5)',
        'update "stock_items" set "title" = @1, "on_hand" = @2, "updated_at" = @3',
        'select * from "stock_items"',
        'COMMIT',
      ],
    );
    assertNoPostgresSyntax(driver.sent);
  });

  test('listStockItems uses select top (n), not limit, and keysets on book_id', async () => {
    const { db, driver } = recordingDb('mssql', () => rows());
    await listStockItems(db, { after: command.bookId, limit: 50 });
    assert.equal(driver.sent[0]!.sql, 'select top(51) * from "stock_items" where "book_id" > @1 order by "book_id"');
    assertNoPostgresSyntax(driver.sent);
  });

  test('listDeadLetters uses select top (n), not limit, newest first', async () => {
    const { db, driver } = recordingDb('mssql', () => rows());
    await listDeadLetters(db, { consumer: 'inventory.reserve-stock', after: '42', limit: 20 });
    assert.equal(driver.sent[0]!.sql, 'select top(21) * from "dead_letters" where "consumer" = @1 and "id" < @2 order by "id" desc');
    assertNoPostgresSyntax(driver.sent);
  });

  test('insertDeadLetter uses output inserted.id, not returning, and reads the bigint id back as a string', async () => {
    const { db, driver } = recordingDb('mssql', () => rows({ id: '17' }));
    const id = await insertDeadLetter(db, {
      consumer: 'inventory.reserve-stock',
      messageId: 'msg-1',
      keySource: 'body',
      payload: { data: { quantity: 2 } },
      storedFingerprint: 'a'.repeat(64),
      receivedFingerprint: 'b'.repeat(64),
      reason: 'fingerprint-mismatch',
      receivedAt: now,
    });
    assert.equal(id, '17');
    assert.equal(
      driver.sent[0]!.sql,
      'insert into "dead_letters" ("consumer", "message_id", "key_source", "payload", "stored_fingerprint", "received_fingerprint", "reason", "received_at") output "inserted"."id" values (@1, @2, @3, @4, @5, @6, @7, @8)',
    );
    assert.equal(driver.sent[0]!.parameters[3], '{"data":{"quantity":2}}', 'JSON is sent as text for nvarchar(max)');
    assertNoPostgresSyntax(driver.sent);
  });

  test('on PostgreSQL the same functions use limit and returning (the dialect switch works both ways)', async () => {
    const { db, driver } = recordingDb('postgres', (q) => (q.sql.startsWith('insert') ? rows({ id: '1' }) : rows()));
    await listStockItems(db, { limit: 10 });
    await listDeadLetters(db, { limit: 10 });
    await insertDeadLetter(db, {
      consumer: 'c',
      messageId: 'm',
      keySource: 'body',
      payload: {},
      storedFingerprint: 'a',
      receivedFingerprint: 'b',
      reason: 'r',
      receivedAt: now,
    });
    assert.match(driver.sent[0]!.sql, / limit \$1$/);
    assert.match(driver.sent[1]!.sql, / limit \$1$/);
    assert.match(driver.sent[2]!.sql, / returning "id"$/);
  });
});

// ---------------------------------------------------------------------------------------------

describe('parseMssqlUrl and the tedious configuration', () => {
  test('mssql://sa:p%40ss@db.local:14330/bookstore?trustServerCertificate=true', () => {
    assert.deepEqual(parseMssqlUrl('mssql://sa:p%40ss@db.local:14330/bookstore?trustServerCertificate=true'), {
      server: 'db.local',
      port: 14330,
      database: 'bookstore',
      user: 'sa',
      password: 'p@ss',
      encrypt: true,
      trustServerCertificate: true,
      instanceName: undefined,
    });
  });

  test('sqlserver:// is accepted; defaults: port 1433, encrypt on, certificate checked', () => {
    const s = parseMssqlUrl('sqlserver://app:secret@sql.example.com/inventory_db');
    assert.deepEqual(
      [s.server, s.port, s.database, s.user, s.password, s.encrypt, s.trustServerCertificate],
      ['sql.example.com', 1433, 'inventory_db', 'app', 'secret', true, false],
    );
    assert.equal(parseMssqlUrl('mssql://sa:x@h/db?encrypt=false').encrypt, false);
    assert.equal(parseMssqlUrl('mssql://sa:x@h/db?instanceName=SQLEXPRESS').instanceName, 'SQLEXPRESS');
  });

  for (const [label, url] of [
    ['no database', 'mssql://sa:x@db.local:1433'],
    ['an empty database', 'mssql://sa:x@db.local:1433/'],
    ['a database name with ;', 'mssql://sa:x@db.local:1433/book;store'],
    ['a database name with a quote', "mssql://sa:x@db.local:1433/book'store"],
    ['a database name with ]', 'mssql://sa:x@db.local:1433/book%5Dstore'],
    ['no host', 'mssql://sa:x@/bookstore'],
    ['a malformed percent-escape in the password', 'mssql://sa:100%zz@db.local/bookstore'],
    ['a non-numeric port', 'mssql://sa:x@db.local:port/bookstore'],
  ] as const) {
    test(`${label} -> DatabaseUrlError`, () => {
      assert.throws(
        () => parseMssqlUrl(url),
        (e: unknown) => e instanceof DatabaseUrlError && !String((e as Error).message).includes('100%zz'),
      );
    });
  }

  test('tediousConfig: bounded connect and request timeouts, statement-level errors, UTC', () => {
    const s = parseMssqlUrl('mssql://sa:p%40ss@db.local:14330/bookstore?trustServerCertificate=true');
    const config = tediousConfig(s, 'bookstore', { connectTimeoutMs: 2000, requestTimeoutMs: 35_000 });
    assert.equal(config.server, 'db.local');
    assert.deepEqual(config.authentication, { type: 'default', options: { userName: 'sa', password: 'p@ss' } });
    assert.equal(config.options?.database, 'bookstore');
    assert.equal(config.options?.port, 14330);
    assert.equal(config.options?.encrypt, true);
    assert.equal(config.options?.trustServerCertificate, true);
    assert.equal(config.options?.connectTimeout, 2000);
    assert.equal(config.options?.requestTimeout, 35_000);
    assert.equal(config.options?.abortTransactionOnError, false, 'a duplicate key must end only the statement, not the claim transaction');
    assert.equal(config.options?.useUTC, true);
    assert.equal(config.options?.lowerCaseGuids, true, 'uniqueidentifier values read back in lower case, as the service writes them');
    const connection = new tedious.Connection(config);
    assert.equal(connection.config.options.lowerCaseGuids, true, 'tedious accepts the configuration and keeps lowerCaseGuids');
  });

  test('a named instance is reached by instanceName, without a port', () => {
    const config = tediousConfig(parseMssqlUrl('mssql://sa:x@host/db?instanceName=SQLEXPRESS'), 'db', {
      connectTimeoutMs: 1000,
      requestTimeoutMs: 1000,
    });
    assert.equal(config.options?.instanceName, 'SQLEXPRESS');
    assert.equal(config.options?.port, undefined);
  });
});

// ---------------------------------------------------------------------------------------------
// Kysely's real MssqlDriver on a tedious whose network methods are replaced.
// ---------------------------------------------------------------------------------------------

interface WireRequest {
  kind: 'rpc' | 'batch' | 'tm';
  sql: string;
  parameters: { name: string; type: string; value: unknown }[];
}

interface WireReply {
  rows?: Record<string, unknown>[];
  rowCount?: number;
  error?: Error;
  /** Answer as a session with NOCOUNT ON does: no DONE token carries a row count. */
  noCount?: boolean;
  /**
   * The server rolled the session's transaction back before answering, as it does to a deadlock
   * victim (1205): the reply carries ENVCHANGE ROLLBACK_TXN, and the session has no transaction left.
   */
  endsTransaction?: boolean;
}

/** The probe at open reads whether READ_COMMITTED_SNAPSHOT is on: answer "on" unless a test says otherwise. */
const snapshotOn = (request: WireRequest): WireReply | undefined =>
  request.sql === READ_COMMITTED_SNAPSHOT_SQL ? { rows: [{ rcsi: 1 }] } : undefined;

/** The session batch every pooled connection sends first, with the default 5 s lock timeout. */
const SESSION_BATCH = 'SET NOCOUNT OFF; SET XACT_ABORT OFF; SET LOCK_TIMEOUT 5000;';

/**
 * Replaces tedious.Connection's network methods for one test. execSql is what sends an RPC call to
 * sp_executesql; execSqlBatch sends a plain SQL batch. Replies: rows and a row count (carried by a
 * DONEINPROC token, as SQL Server reports it), or an error. `connectError` refuses a login.
 */
function fakeTedious(
  t: TestContext,
  reply: (request: WireRequest) => WireReply = () => ({}),
  connectError: (options: { database?: string }) => Error | undefined = () => undefined,
) {
  const wire: WireRequest[] = [];
  const opened: tedious.Connection[] = [];
  const closed = new Set<tedious.Connection>();
  const proto = tedious.Connection.prototype;
  // The server's side of each session's transaction, told to tedious as SQL Server does: ENVCHANGE tokens,
  // handled by tedious's own token handler (which keeps Connection.inTransaction).
  const serverTransactions = new Set<tedious.Connection>();
  const envChange = (connection: tedious.Connection, request: tedious.Request, token: 'begin' | 'commit' | 'rollback') => {
    const handler = new RequestTokenHandler(connection, request);
    const descriptor = Buffer.from([1, 0, 0, 0, 0, 0, 0, 0]);
    const none = Buffer.alloc(0);
    if (token === 'begin') handler.onBeginTransaction(new BeginTransactionEnvChangeToken(descriptor, none));
    else if (token === 'commit') handler.onCommitTransaction(new CommitTransactionEnvChangeToken(none, descriptor));
    else handler.onRollbackTransaction(new RollbackTransactionEnvChangeToken(none, descriptor));
  };
  const complete = (request: tedious.Request, kind: WireRequest['kind'], connection: tedious.Connection) => {
    const sent: WireRequest = {
      kind,
      sql: String((request as unknown as { sqlTextOrProcedure: string }).sqlTextOrProcedure),
      parameters: ((request as unknown as { parameters: { name: string; type: { name: string }; value: unknown }[] }).parameters ?? []).map(
        (p) => ({ name: p.name, type: p.type.name, value: p.value }),
      ),
    };
    wire.push(sent);
    setImmediate(() => {
      const r = { ...snapshotOn(sent), ...reply(sent) };
      if (r.endsTransaction && serverTransactions.delete(connection)) envChange(connection, request, 'rollback');
      for (const row of r.rows ?? []) {
        request.emit('row', Object.entries(row).map(([colName, value]) => ({ metadata: { colName }, value })) as never);
      }
      const rowCount = r.noCount ? undefined : (r.rowCount ?? r.rows?.length ?? 1);
      if (r.error === undefined) request.emit('doneInProc', rowCount, false, []);
      // tedious starts every request's count at 0 and adds only the counts the server sent.
      (request as unknown as { callback: (e?: Error, n?: number) => void }).callback(r.error, rowCount ?? 0);
    });
  };
  t.mock.method(proto, 'connect', function (this: tedious.Connection, listener?: (err?: Error) => void) {
    opened.push(this);
    const refused = connectError((this as unknown as { config: { options: { database?: string } } }).config.options);
    setImmediate(() => listener?.(refused));
  });
  t.mock.method(proto, 'execSql', function (this: tedious.Connection, request: tedious.Request) {
    complete(request, 'rpc', this);
  });
  t.mock.method(proto, 'execSqlBatch', function (this: tedious.Connection, request: tedious.Request) {
    complete(request, 'batch', this);
  });
  t.mock.method(proto, 'close', function (this: tedious.Connection) {
    closed.add(this);
    setImmediate(() => this.emit('end'));
  });
  // Transaction manager requests (BEGIN/COMMIT/ROLLBACK are TDS requests, not SQL text). COMMIT or
  // ROLLBACK on a session with no transaction fails as SQL Server fails it (3902, 3903).
  for (const [method, name] of [
    ['beginTransaction', 'BEGIN'],
    ['commitTransaction', 'COMMIT'],
    ['rollbackTransaction', 'ROLLBACK'],
  ] as const) {
    t.mock.method(proto, method, function (this: tedious.Connection, callback: (err?: Error) => void) {
      wire.push({ kind: 'tm', sql: name, parameters: [] });
      setImmediate(() => {
        const request = new tedious.Request('', () => undefined);
        if (name === 'BEGIN') {
          serverTransactions.add(this);
          envChange(this, request, 'begin');
          callback();
        } else if (!serverTransactions.delete(this)) {
          callback(noTransaction(name));
        } else {
          envChange(this, request, name === 'COMMIT' ? 'commit' : 'rollback');
          callback();
        }
      });
    });
  }
  return { wire, opened, closed };
}

/** SQL Server's answer to a COMMIT or ROLLBACK on a session whose transaction has already ended. */
/** What SQL Server sends the transaction it chose as a deadlock victim (and rolled back). */
const deadlockVictim = () =>
  Object.assign(
    new tedious.RequestError(
      'Transaction (Process ID 57) was deadlocked on lock resources with another process and has been chosen as the deadlock victim. Rerun the transaction.',
      'EREQUEST',
    ),
    { number: 1205, class: 13 },
  );

function noTransaction(name: 'COMMIT' | 'ROLLBACK'): Error {
  const number = name === 'COMMIT' ? 3902 : 3903;
  const message = `The ${name} TRANSACTION request has no corresponding BEGIN TRANSACTION.`;
  return Object.assign(new tedious.RequestError(message, 'EREQUEST'), { number, class: 16 });
}

describe("SQL Server sessions through Kysely's real MssqlDriver", () => {
  const url = 'mssql://sa:p%40ss@db.local:1433/bookstore?trustServerCertificate=true';

  test('createDatabase (asked to create): ensures the database, then each pooled session sends its settings in a plain batch before any statement', async (t) => {
    const { wire, opened } = fakeTedious(t);
    const handle = await createDatabase(url, { lockTimeoutMs: 5000, connectTimeoutMs: 2000, createDatabase: true });
    try {
      assert.equal(handle.kind, 'mssql');
      assert.equal(dialectOf(handle.db), 'mssql');
      assert.equal(await claimKey(handle.db, claim), true);
    } finally {
      await handle.close();
    }
    const [ensure, probe, ...pool] = wire;
    assert.equal(ensure?.kind, 'rpc');
    assert.equal(ensure?.sql, ENSURE_DATABASE_SQL);
    assert.deepEqual(ensure?.parameters, [{ name: 'name', type: 'NVarChar', value: 'bookstore' }]);
    assert.equal(probe?.sql, READ_COMMITTED_SNAPSHOT_SQL);
    assert.equal(opened.length, 3, 'one connection to master, one probe of the database, one pooled');
    const [master, probed, pooled] = opened.map((c) => (c as unknown as { config: { options: Record<string, unknown> } }).config.options);
    assert.equal(master!.database, 'master');
    assert.equal(master!.connectTimeout, 2000);
    assert.equal(probed!.database, 'bookstore');
    assert.equal(pooled!.database, 'bookstore');
    assert.equal(pooled!.connectTimeout, 2000, 'connect bounded by connectTimeoutMs');
    assert.equal(pooled!.requestTimeout, 35_000, 'requests bounded: lock timeout + 30 s, never 0 (unbounded)');
    // SET options made inside sp_executesql are restored when it returns: the bound must be a batch.
    assert.deepEqual(pool[0], { kind: 'batch', sql: SESSION_BATCH, parameters: [] });
    assert.ok(
      pool.slice(1).every((r) => r.kind === 'rpc'),
      'statements go through sp_executesql',
    );
    assert.ok(!pool.slice(1).some((r) => /SET LOCK_TIMEOUT/i.test(r.sql)), 'no per-claim SET that would bound nothing');
    assert.match(pool.at(-1)!.sql, INSERT_INBOX);
  });

  test('a session whose SET LOCK_TIMEOUT fails is closed, not leaked, and the query fails', { timeout: 10_000 }, async (t) => {
    const { opened, closed } = fakeTedious(t, (request) =>
      request.kind === 'batch' ? { error: new tedious.RequestError('SET failed', 'EREQUEST') } : {},
    );
    const db = new Kysely<Database>({ dialect: mssqlDialect(parseMssqlUrl(url), { lockTimeoutMs: 5000, connectTimeoutMs: 600 }) });
    try {
      await assert.rejects(sql`select 1`.execute(db));
    } finally {
      await db.destroy();
    }
    assert.ok(opened.length >= 1);
    assert.deepEqual(
      opened.filter((c) => !closed.has(c)),
      [],
      'every connection that failed its session setup was closed',
    );
  });

  test('root cause: a SET sent through Kysely travels inside sp_executesql (an RPC), where SQL Server scopes it to that call', async (t) => {
    const { wire } = fakeTedious(t);
    const db = new Kysely<Database>({ dialect: mssqlDialect(parseMssqlUrl(url), { lockTimeoutMs: 5000 }) });
    try {
      await sql`SET LOCK_TIMEOUT 5000`.execute(db);
    } finally {
      await db.destroy();
    }
    assert.deepEqual(
      wire.filter((r) => r.sql.includes('SET LOCK_TIMEOUT 5000')).map((r) => [r.kind, r.sql]),
      [
        ['batch', SESSION_BATCH],
        ['rpc', 'SET LOCK_TIMEOUT 5000'],
      ],
      'the session batch at connect, then the RPC Kysely sends',
    );
  });

  test('processOnce end to end on SQL Server: claim, work, complete and commit; a duplicate (AggregateError 2627) replays; a lock timeout (1222) is in flight', async (t) => {
    let mode: 'first' | 'duplicate' | 'locked' = 'first';
    const stored = {
      message_id: 'msg-1',
      consumer: 'inventory.reserve-stock',
      key_source: 'body',
      fingerprint: 'f'.repeat(64),
      received_at: now,
      completed_at: now,
      outcome: '{"result":"reserved"}',
      attempts: 1,
      lease_until: null,
    };
    const { wire } = fakeTedious(t, (request) => {
      if (INSERT_INBOX.test(request.sql)) {
        if (mode === 'duplicate') {
          const duplicate = Object.assign(new tedious.RequestError("Violation of PRIMARY KEY constraint 'inbox_pk'.", 'EREQUEST'), {
            number: 2627,
            class: 14,
          });
          const terminated = Object.assign(new tedious.RequestError('The statement has been terminated.', 'EREQUEST'), { number: 3621 });
          return { error: new AggregateError([duplicate, terminated]) };
        }
        if (mode === 'locked')
          return { error: Object.assign(new tedious.RequestError('Lock request time out period exceeded.', 'EREQUEST'), { number: 1222 }) };
      }
      if (request.sql.startsWith('select * from "inbox"')) return { rows: [stored] };
      return { rowCount: 1 };
    });
    const handle = await createDatabase(url, { lockTimeoutMs: 5000 });
    const ctx = { store: new InboxStore(handle.db), lockTimeoutMs: 5000, now: () => now };
    const command = {
      consumer: 'inventory.reserve-stock',
      key: { messageId: 'msg-1', source: 'body' as const },
      fingerprint: 'f'.repeat(64),
      payload: {},
    };
    const work = {
      consumer: 'inventory.reserve-stock',
      run: async (trx: Tx) => {
        await trx.selectFrom('stock_items').select('book_id').execute();
        return { result: 'reserved' };
      },
    };
    try {
      const first = await processOnce(ctx, work, command);
      assert.equal(first.kind, 'processed');
      const statements = wire
        .filter((r) => r.sql !== 'select 1' && r.sql !== READ_COMMITTED_SNAPSHOT_SQL)
        .map((r) => `${r.kind} ${r.sql.split(' (')[0]!.split(' where ')[0]}`);
      assert.deepEqual(statements, [
        `batch ${SESSION_BATCH}`,
        'tm BEGIN',
        'rpc insert into "inbox"',
        'rpc select "book_id" from "stock_items"',
        'rpc update "inbox" set "completed_at" = @1, "outcome" = @2, "lease_until" = @3',
        'tm COMMIT',
      ]);

      mode = 'duplicate';
      wire.length = 0;
      const again = await processOnce(ctx, work, command);
      assert.equal(again.kind, 'duplicate');
      assert.deepEqual(again.outcome, { result: 'reserved' });
      assert.deepEqual(
        wire.filter((r) => r.sql !== 'select 1').map((r) => `${r.kind} ${r.sql.split(' (')[0]!.split(' where ')[0]}`),
        ['tm BEGIN', 'rpc insert into "inbox"', 'tm COMMIT', 'rpc select * from "inbox"'],
      );

      mode = 'locked';
      wire.length = 0;
      await assert.rejects(processOnce(ctx, work, command), (error: unknown) => (error as Error).name === 'InFlightError');
      assert.deepEqual(
        wire.filter((r) => r.kind === 'tm').map((r) => r.sql),
        ['BEGIN', 'ROLLBACK'],
      );
    } finally {
      await handle.close();
    }
  });

  test('a deadlock victim (1205): the server rolled back, no ROLLBACK is sent, the 1205 comes back (not 3903) and the session goes on', async (t) => {
    let deadlock = true;
    const { wire } = fakeTedious(t, (request) =>
      request.sql.startsWith('select "book_id" from "stock_items"') && deadlock
        ? ((deadlock = false), { error: deadlockVictim(), endsTransaction: true })
        : {},
    );
    const handle = await createDatabase(url, { lockTimeoutMs: 5000, poolMax: 1 });
    const work = (trx: Kysely<Database>) => trx.selectFrom('stock_items').select('book_id').execute();
    let caught: unknown;
    try {
      await handle.db
        .transaction()
        .execute(work)
        .catch((error: unknown) => (caught = error));
      await handle.db.transaction().execute(work);
    } finally {
      await handle.close();
    }
    assert.equal(isDeadlock(caught), true, `the deadlock comes back: ${String(caught)}`);
    assert.equal(isTransactionConflict(caught), true);
    assert.equal(renderError(caught, { url: '/orders' } as FastifyRequest).body.type, '/problems/database-busy');
    assert.deepEqual(
      wire.filter((r) => r.kind === 'tm').map((r) => r.sql),
      ['BEGIN', 'BEGIN', 'COMMIT'],
      'no ROLLBACK for a transaction the server already ended; the same session begins and commits the next one',
    );
  });

  test('group commit on SQL Server: a deadlock victim is run again and commits; one deadlocked every time is 503 database-busy', async (t) => {
    let deadlocks = 1;
    const { wire } = fakeTedious(t, (request) => {
      if (request.sql.startsWith('select "book_id" from "stock_items"') && deadlocks > 0) {
        deadlocks--;
        return { error: deadlockVictim(), endsTransaction: true };
      }
      return { rowCount: 1 };
    });
    const handle = await createDatabase(url, { lockTimeoutMs: 5000 });
    const ctx = { store: new InboxStore(handle.db), lockTimeoutMs: 5000, now: () => now };
    const committer = new GroupCommitter(ctx, {
      maxBatch: 64,
      concurrency: 1,
      queueLimit: 10,
      overloadRetryAfterSeconds: 1,
      cache: new DuplicateCache({ maxEntries: 0, ttlMs: 0, now: () => now }),
    });
    const handler = {
      consumer: 'inventory.reserve-stock',
      run: async (trx: Tx) => {
        await trx.selectFrom('stock_items').select('book_id').execute();
        return { result: 'reserved' };
      },
    };
    const command = (messageId: string) => ({
      consumer: handler.consumer,
      key: { messageId, source: 'body' as const },
      fingerprint: 'f'.repeat(64),
      payload: {},
    });
    try {
      const result = await committer.submit(handler, command('msg-1'));
      assert.equal(result.kind, 'processed');
      assert.deepEqual(result.outcome, { result: 'reserved' });
      assert.deepEqual(
        wire.filter((r) => r.kind === 'tm').map((r) => r.sql),
        ['BEGIN', 'BEGIN', 'COMMIT'],
        'the victim is run again in a new transaction, which commits',
      );

      deadlocks = Infinity;
      const refused = await committer.submit(handler, command('msg-2')).catch((error: unknown) => error);
      assert.equal(isDeadlock(refused), true, `the last attempt's deadlock comes back: ${String(refused)}`);
      const rendered = renderError(refused, { url: '/orders' } as FastifyRequest);
      assert.equal(rendered.body.status, 503);
      assert.equal(rendered.body.type, '/problems/database-busy');
    } finally {
      await handle.close();
    }
  });

  test('claimKey parameters: strings bound as nvarchar (matching nvarchar key columns), Dates as datetimeoffset', async (t) => {
    const { wire } = fakeTedious(t);
    const handle = await createDatabase(url, { lockTimeoutMs: 5000 });
    try {
      await claimKey(handle.db, claim);
    } finally {
      await handle.close();
    }
    const insert = wire.find((r) => INSERT_INBOX.test(r.sql))!;
    assert.deepEqual(
      insert.parameters.map((p) => [p.name, p.type]),
      [
        ['1', 'NVarChar'],
        ['2', 'NVarChar'],
        ['3', 'NVarChar'],
        ['4', 'NVarChar'],
        ['5', 'DateTimeOffset'],
        ['6', 'NVarChar'],
        ['7', 'NVarChar'],
        ['8', 'NVarChar'],
      ],
    );
  });

  test("a Date keeps its milliseconds: tedious DateTime (Kysely's default) would round .007 s to 1/300 s", () => {
    const at = new Date('2026-03-01T12:00:00.007Z');
    const bytes = (type: { generateParameterData: (p: object, o: object) => Iterable<Buffer> }, parameter: object) =>
      Buffer.concat([...type.generateParameterData({ value: at, ...parameter }, { useUTC: true })]);

    // What Kysely would send without the mapping: datetime counts 1/300 s ticks.
    const ticks = bytes(tedious.TYPES.DateTime as never, {}).readUInt32LE(4);
    const msViaDateTime = ((ticks * 10) / 3) % 1000;
    assert.notEqual(Math.round(msViaDateTime * 1000) / 1000, 7, `datetime carries ${msViaDateTime.toFixed(3)} ms, not 7`);

    // What the service's dialect sends: datetimeoffset(7), 100 ns units since midnight UTC.
    const sent = bytes(tedious.TYPES.DateTimeOffset as never, { scale: 7 });
    const hundredNs = sent.readUIntLE(0, 5);
    assert.equal(hundredNs, (12 * 3600 * 1000 + 7) * 10_000);
  });

  test('the dialect binds Dates as DateTimeOffset and leaves every other type alone', async (t) => {
    const { wire } = fakeTedious(t);
    const db = new Kysely<Database>({ dialect: mssqlDialect(parseMssqlUrl(url), { lockTimeoutMs: 5000 }) });
    try {
      await db
        .selectFrom('inbox')
        .selectAll()
        .where('received_at', '<', now)
        .where('attempts', '=', 3)
        .where('message_id', '=', 'm')
        .execute();
    } finally {
      await db.destroy();
    }
    const select = wire.find((r) => r.sql.startsWith('select * from "inbox"'))!;
    assert.deepEqual(
      select.parameters.map((p) => p.type),
      ['DateTimeOffset', 'Int', 'NVarChar'],
    );
  });

  test('the migration lock waits without a bound and fails loudly when refused (sp_getapplock reports a timeout only as -1)', async () => {
    const dialect = mssqlDialect(parseMssqlUrl(url), { lockTimeoutMs: 5000 });
    const { db, driver } = recordingDb('mssql');
    await dialect
      .createAdapter()
      .acquireMigrationLock(db, { lockTable: 'kysely_migration_lock', lockRowId: 'migration_lock', lockTableSchema: undefined });
    const text = driver.sent[0]!.sql;
    // public, not dbo: naming dbo needs db_owner, which a contained user with DDL rights alone lacks.
    assert.match(
      text,
      /EXEC @result = sp_getapplock @DbPrincipal = 'public', @Resource = 'kysely_migration', @LockMode = 'Exclusive', @LockOwner = 'Session', @LockTimeout = -1;/,
    );
    assert.match(text, /IF @result < 0 RAISERROR\(/);
    // Release is Kysely's own, on the same resource and owner.
    await dialect
      .createAdapter()
      .releaseMigrationLock(db, { lockTable: 'kysely_migration_lock', lockRowId: 'migration_lock', lockTableSchema: undefined });
    assert.match(driver.sent[1]!.sql, /sp_releaseapplock @DbPrincipal = 'public', @Resource = 'kysely_migration', @LockOwner = 'Session'/);
    assert.doesNotMatch(driver.sent.map((q) => q.sql).join('\n'), /'dbo'/);
  });

  test('ENSURE_DATABASE_SQL: EXEC() gets a variable, never a function call; a concurrent create (1801) is not an error; READ_COMMITTED_SNAPSHOT on', () => {
    const text = ENSURE_DATABASE_SQL;
    assert.match(text, /^IF DB_ID\(@name\) IS NULL\b/);
    // EXEC ( { @string_variable | [N]'tsql_string' } [+ ...n] ): QUOTENAME() inside EXEC( ) is a syntax error.
    const execArgs = [...text.matchAll(/EXEC(?:UTE)?\s*\(([^)]*)\)/gi)].map((m) => m[1]!.trim());
    assert.deepEqual(execArgs, ['@create', '@snapshot']);
    // Readers (GET /stock, /inbox, the metrics gauges) read committed versions instead of waiting on writers.
    assert.match(
      text,
      /DECLARE @snapshot nvarchar\(300\) = N'ALTER DATABASE ' \+ QUOTENAME\(@name\) \+ N' SET READ_COMMITTED_SNAPSHOT ON';/,
    );
    assert.match(text, /EXEC \(@create\);\s+EXEC \(@snapshot\);/, 'set right after creating, inside the same TRY');
    assert.match(text, /DECLARE @create nvarchar\(300\) = N'CREATE DATABASE ' \+ QUOTENAME\(@name\);/);
    assert.match(text, /IF ERROR_NUMBER\(\) <> 1801 OR DB_ID\(@name\) IS NULL THROW;/);
    assert.doesNotMatch(text, /EXEC\s*\([^)]*QUOTENAME/i);
  });
});

// ---------------------------------------------------------------------------------------------
// Real sockets: an unreachable or silent server fails fast with a clear error.
// ---------------------------------------------------------------------------------------------

describe('what a live SQL Server would do that the statements alone do not show', () => {
  const url = 'mssql://app:p%40ss@db.local:1433/bookstore?trustServerCertificate=true';
  const reserve = {
    orderId: '0193a1b2-0000-7000-8000-0000000000a1',
    bookId: '0193a1b2-0000-7000-8000-000000000001',
    quantity: 2,
    messageId: 'm-1',
  };

  test('the session batch turns NOCOUNT and XACT_ABORT off and bounds lock waits, whatever the server defaults are', () => {
    assert.equal(sessionSettingsBatch(5000), SESSION_BATCH);
    const settings = SESSION_BATCH.split(';')
      .map((x) => x.trim())
      .filter((x) => x !== '');
    assert.deepEqual(settings, ['SET NOCOUNT OFF', 'SET XACT_ABORT OFF', 'SET LOCK_TIMEOUT 5000']);
    assert.equal(
      tediousConfig(parseMssqlUrl(url), 'bookstore', { connectTimeoutMs: 1, requestTimeoutMs: 1 }).options?.abortTransactionOnError,
      false,
    );
  });

  test('without DATABASE_CREATE, start-up never connects to master: it probes its own database only', async (t) => {
    const { wire, opened } = fakeTedious(t);
    const handle = await createDatabase(url, { lockTimeoutMs: 5000, connectTimeoutMs: 2000 });
    await handle.close();
    const databases = opened.map((c) => (c as unknown as { config: { options: { database: string } } }).config.options.database);
    assert.deepEqual(databases, ['bookstore']);
    assert.deepEqual(
      wire.map((r) => r.sql),
      [READ_COMMITTED_SNAPSHOT_SQL],
    );
  });

  test('a database with READ_COMMITTED_SNAPSHOT off opens with a warning that says how to turn it on', async (t) => {
    fakeTedious(t, (request) => (request.sql === READ_COMMITTED_SNAPSHOT_SQL ? { rows: [{ rcsi: 0 }] } : {}));
    const warnings: string[] = [];
    const handle = await createDatabase(url, { lockTimeoutMs: 5000, onWarning: (m) => warnings.push(m) });
    await handle.close();
    assert.equal(warnings.length, 1);
    assert.match(warnings[0]!, /READ_COMMITTED_SNAPSHOT off/);
    assert.match(warnings[0]!, /ALTER DATABASE \[bookstore\] SET READ_COMMITTED_SNAPSHOT ON WITH ROLLBACK IMMEDIATE/);
  });

  test('NOCOUNT on behind the service: a reservation whose update reports no row count fails, it is not "unknown-book"', async (t) => {
    fakeTedious(t, (request) => {
      if (request.sql.startsWith('update "stock_items"')) return { noCount: true };
      if (request.sql.startsWith('SELECT * FROM "stock_items" WITH'))
        return { rows: [{ book_id: reserve.bookId, title: 'Dune', on_hand: 10, reserved: 0, updated_at: now }] };
      return request.sql.startsWith('select') ? { rows: [] } : {};
    });
    const handle = await createDatabase(url, { lockTimeoutMs: 5000 });
    try {
      await assert.rejects(
        handle.db.transaction().execute((trx) => reserveStock(trx, reserve, now)),
        (error: unknown) => error instanceof MissingRowCountError,
      );
      await assert.rejects(
        setStock(handle.db, { bookId: reserve.bookId, title: 'Dune', onHand: 10 }, now),
        (error: unknown) => error instanceof MissingRowCountError,
        'PUT /stock would otherwise read "no row updated" and answer 409 stock-below-reserved',
      );
    } finally {
      await handle.close();
    }
  });

  test('a refusal is still a business outcome: too little on the locked stock row is recorded as insufficient stock', async (t) => {
    fakeTedious(t, (request) => {
      if (request.sql.startsWith('SELECT * FROM "stock_items" WITH'))
        return { rows: [{ book_id: reserve.bookId, title: 'Dune', on_hand: 1, reserved: 0, updated_at: now }] };
      return request.sql.startsWith('select') ? { rows: [] } : {};
    });
    const handle = await createDatabase(url, { lockTimeoutMs: 5000 });
    try {
      const outcome = await handle.db.transaction().execute((trx) => reserveStock(trx, reserve, now));
      assert.equal(outcome.result, 'insufficient-stock');
    } finally {
      await handle.close();
    }
  });

  for (const [label, refusal] of [
    ['login failed (18456)', new tedious.ConnectionError("Login failed for user 'app'.", 'ELOGIN')],
    [
      'a database the login cannot open (4060)',
      new tedious.ConnectionError('Cannot open database "bookstore" requested by the login. The login failed.', 'ELOGIN'),
    ],
  ] as const) {
    test(`${label}: a permission error that says so, not "cannot reach SQL Server"`, async (t) => {
      fakeTedious(
        t,
        () => ({}),
        () => refusal,
      );
      await assert.rejects(createDatabase(url, { lockTimeoutMs: 5000 }), (error: unknown) => {
        assert.ok(error instanceof DatabasePermissionError, String(error));
        assert.match(error.message, /refused access to database "bookstore"/);
        assert.match(error.message, /DATABASE_CREATE=true or npm run db:create/);
        assert.doesNotMatch(error.message, /cannot reach/);
        assert.ok(!error.message.includes('p@ss'), 'no password in the message');
        return true;
      });
    });
  }

  test('DATABASE_CREATE with a login that may not create databases (262): a permission error', async (t) => {
    const denied = Object.assign(new tedious.RequestError("CREATE DATABASE permission denied in database 'master'.", 'EREQUEST'), {
      number: 262,
    });
    fakeTedious(t, (request) => (request.sql === ENSURE_DATABASE_SQL ? { error: denied } : {}));
    await assert.rejects(createDatabase(url, { lockTimeoutMs: 5000, createDatabase: true }), (error: unknown) => {
      assert.ok(error instanceof DatabasePermissionError, String(error));
      assert.match(error.message, /CREATE DATABASE permission denied/);
      return true;
    });
  });

  test('a full pool (every connection busy) is reported as exhausted, not as a connection failure', { timeout: 10_000 }, async (t) => {
    fakeTedious(t);
    const db = new Kysely<Database>({
      dialect: mssqlDialect(parseMssqlUrl(url), { lockTimeoutMs: 5000, poolMax: 1, connectTimeoutMs: 300 }),
    });
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let holding!: () => void;
    const held = new Promise<void>((resolve) => (holding = resolve));
    const holder = db.transaction().execute(async (trx) => {
      await sql`select 1`.execute(trx);
      holding();
      await released;
    });
    try {
      await held;
      await assert.rejects(sql`select 2`.execute(db), (error: unknown) => {
        assert.ok(isPoolExhausted(error), `not classified as pool exhaustion: ${String(error)}`);
        assert.equal(isConnectionFailure(error), false);
        return true;
      });
    } finally {
      release();
      await holder;
      await db.destroy();
    }
  });

  test('pruning on SQL Server: a batch never exceeds the lock-escalation-safe size, whatever INBOX_PRUNE_BATCH_SIZE says', async () => {
    const { db, driver } = recordingDb('mssql', (_q, i) => affected(i === 0 ? MSSQL_MAX_DELETE_BATCH : 7));
    const result = await pruneCompletedInbox(db, now, { batchSize: 10_000 });
    assert.ok(MSSQL_MAX_DELETE_BATCH * 2 < 5000, 'a key lock per row in two indexes stays below the 5,000-lock escalation threshold');
    assert.deepEqual(
      driver.sent.map((q) => q.parameters[0]),
      [MSSQL_MAX_DELETE_BATCH, MSSQL_MAX_DELETE_BATCH],
    );
    assert.match(driver.sent[0]!.sql, /SELECT TOP \(@1\) \* FROM "inbox" WITH \(ROWLOCK, UPDLOCK, READPAST\)/);
    assert.deepEqual(result, { deleted: MSSQL_MAX_DELETE_BATCH + 7, batches: [MSSQL_MAX_DELETE_BATCH, 7], complete: true });

    const pg = recordingDb('postgres', () => affected(3));
    await pruneCompletedInbox(pg.db, now, { batchSize: 10_000 });
    assert.equal(pg.driver.sent[0]!.parameters.at(-1), 10_000, 'PostgreSQL locks rows without escalating: no cap there');
  });
});

describe('unreachable SQL Server (real sockets)', () => {
  test('connection refused (127.0.0.1:1): DatabaseUnavailableError naming host and port, quickly', { timeout: 20_000 }, async () => {
    const started = performance.now();
    await assert.rejects(
      createDatabase('mssql://sa:x@127.0.0.1:1/bookstore', { lockTimeoutMs: 5000, connectTimeoutMs: 2000 }),
      (error: unknown) => {
        assert.ok(error instanceof DatabaseUnavailableError, String(error));
        assert.match(error.message, /127\.0\.0\.1:1\b/);
        assert.ok(isConnectionFailure(error.cause), 'the cause is a recognised connection failure');
        assert.ok(!error.message.includes('x@'), 'no credentials in the message');
        return true;
      },
    );
    const elapsed = performance.now() - started;
    assert.ok(elapsed < 5000, `rejected after ${Math.round(elapsed)} ms`);
  });

  test('a server that accepts TCP but never answers: rejected by connectTimeoutMs, not left hanging', { timeout: 20_000 }, async () => {
    const sockets = new Set<net.Socket>();
    const server = net.createServer((socket) => {
      sockets.add(socket);
      socket.on('error', () => {});
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as net.AddressInfo;
    try {
      const started = performance.now();
      await assert.rejects(
        createDatabase(`mssql://sa:x@127.0.0.1:${port}/bookstore`, { lockTimeoutMs: 5000, connectTimeoutMs: 1500 }),
        (error: unknown) => {
          assert.ok(error instanceof DatabaseUnavailableError, String(error));
          assert.match(error.message, new RegExp(`127\\.0\\.0\\.1:${port}\\b`));
          assert.ok(isConnectionFailure(error.cause), `cause: ${String((error as Error).cause)}`);
          return true;
        },
      );
      const elapsed = performance.now() - started;
      assert.ok(elapsed >= 1400 && elapsed < 6000, `rejected after ${Math.round(elapsed)} ms`);
    } finally {
      for (const s of sockets) s.destroy();
      server.close();
    }
  });

  test(
    'a pool that cannot connect: a query rejects within the acquire bound with an error classified as a connection failure',
    { timeout: 20_000 },
    async () => {
      const db = new Kysely<Database>({
        dialect: mssqlDialect(parseMssqlUrl('mssql://sa:x@127.0.0.1:1/bookstore'), { lockTimeoutMs: 5000, connectTimeoutMs: 1500 }),
      });
      const started = performance.now();
      try {
        await assert.rejects(sql`select 1`.execute(db), (error: unknown) => {
          assert.ok(isConnectionFailure(error), `not classified as a connection failure: ${String(error)}`);
          return true;
        });
      } finally {
        await db.destroy();
      }
      const elapsed = performance.now() - started;
      assert.ok(elapsed < 6000, `rejected after ${Math.round(elapsed)} ms`);
    },
  );
});

describe('group commit SQL on SQL Server', () => {
  const claimFor = (messageId: string) => ({ ...claim, messageId });

  test('claimKeys: one plain insert per key, in message-id order; a duplicate (2627) is taken and the transaction goes on', async () => {
    const { db, driver } = recordingDb('mssql', (q) => (q.parameters[0] === 'msg-b' ? [tediousUnique(2627)] : affected(1)));
    const claimed = await db.transaction().execute((trx) => claimKeys(trx, [claimFor('msg-c'), claimFor('msg-a'), claimFor('msg-b')]));
    assert.deepEqual([...claimed].sort(), ['msg-a', 'msg-c']);
    assert.deepEqual(
      driver.sent.map((s) => s.parameters[0]),
      ['msg-a', 'msg-b', 'msg-c'],
      'keys claimed in sorted order, so batches cannot deadlock',
    );
    for (const sent of driver.sent) assert.match(sent.sql, INSERT_INBOX);
    assert.deepEqual(
      driver.events.map((e) => e.split(' (')[0]),
      ['BEGIN', 'insert into "inbox"', 'insert into "inbox"', 'insert into "inbox"', 'COMMIT'],
    );
    assertNoPostgresSyntax(driver.sent);
  });

  test('claimKeys on PostgreSQL: one insert of the rows as JSON ... on conflict do nothing returning the claimed ids, sorted; the same text for any count', async () => {
    const { db, driver } = recordingDb('postgres', () => rows({ message_id: 'msg-a' }));
    const claimed = await db.transaction().execute((trx) => claimKeys(trx, [claimFor('msg-c'), claimFor('msg-a')]));
    assert.deepEqual([...claimed], ['msg-a']);
    assert.equal(driver.sent.length, 1);
    assert.match(
      driver.sent[0]!.sql,
      /^insert into "inbox" \("message_id", .+\) select "message_id", .+ from json_populate_recordset\(null::"inbox", cast\(\$1 as json\)\) on conflict \("message_id", "consumer"\) do nothing returning "message_id"$/,
    );
    assert.equal(driver.sent[0]!.parameters.length, 1);
    const sent = JSON.parse(driver.sent[0]!.parameters[0] as string) as { message_id: string; received_at: string; outcome: null }[];
    assert.deepEqual(
      sent.map((row) => row.message_id),
      ['msg-a', 'msg-c'],
    );
    assert.equal(sent[0]!.received_at, now.toISOString());
    assert.equal(sent[0]!.outcome, null);

    await db.transaction().execute((trx) => claimKeys(trx, [claimFor('msg-d'), claimFor('msg-e'), claimFor('msg-f')]));
    assert.equal(driver.sent[1]!.sql, driver.sent[0]!.sql, 'three claims send the text two did');
  });

  test('completeClaims: one update by key; SQL Server chooses each outcome by CASE, PostgreSQL reads the outcomes as JSON documents', async () => {
    const completions = [
      { messageId: 'msg-a', outcome: { result: 'reserved' } },
      { messageId: 'msg-b', outcome: { result: 'unknown-book' } },
    ];
    const mssql = recordingDb('mssql', () => affected(2));
    await mssql.db.transaction().execute((trx) => completeClaims(new DeferredWrites(trx), trx, 'c', completions, now));
    assert.equal(
      mssql.driver.sent[0]!.sql,
      'update "inbox" set "completed_at" = @1, "outcome" = case "message_id" when @2 then @3 when @4 then @5 end, "lease_until" = @6 where "consumer" = @7 and "message_id" in (@8, @9)',
    );
    assert.deepEqual(mssql.driver.sent[0]!.parameters, [
      now,
      'msg-a',
      '{"result":"reserved"}',
      'msg-b',
      '{"result":"unknown-book"}',
      null,
      'c',
      'msg-a',
      'msg-b',
    ]);
    assertNoPostgresSyntax(mssql.driver.sent);

    const postgres = recordingDb('postgres', () => affected(2));
    await postgres.db.transaction().execute(async (trx) => {
      const writes = new DeferredWrites(trx);
      await completeClaims(writes, trx, 'c', completions, now);
      assert.equal(postgres.driver.sent.length, 0, 'PostgreSQL defers the update to flush');
      await writes.flush();
    });
    // The update runs inside a statement that checks its row count, so a COMMIT sent behind it never
    // commits a completion that missed a row.
    assert.equal(
      postgres.driver.sent[0]!.sql,
      'with w0 as (update "inbox" set "completed_at" = $1, "outcome" = d.outcome, "lease_until" = null ' +
        'from json_to_recordset(cast($2 as json)) as d(message_id text, outcome jsonb) ' +
        'where "inbox"."consumer" = $3 and "inbox"."message_id" = any($4) and "inbox"."message_id" = d.message_id returning 1) ' +
        "select case when (select count(*) from w0) = $5::int then 0 else cast($6::text || ': changed ' || (select count(*) from w0) " +
        "|| ' rows, expected ' || $5::int as int) end as checked",
    );
    const [at, json, consumer, ids, expected] = postgres.driver.sent[0]!.parameters;
    assert.deepEqual([at, consumer, ids, expected], [now, 'c', ['msg-a', 'msg-b'], 2]);
    assert.deepEqual(JSON.parse(json as string), [
      { message_id: 'msg-a', outcome: { result: 'reserved' } },
      { message_id: 'msg-b', outcome: { result: 'unknown-book' } },
    ]);
  });

  test('reserveStockBatch: orders locked in order-id order, then stock rows with UPDLOCK in book order, decisions in arrival order, one insert, one update', async () => {
    const book1 = '0b7e1a9e-0d0b-4f2a-8a53-7d4c1f0f2e33';
    const book2 = '1c8f2b0f-1e1c-4a3b-9b64-8e5d2a1a3f44';
    const unknown = '2d9a3c1a-2f2d-4b4c-8c75-9f6e3b2b4a55';
    const order = (n: number) => `6f1c1d52-3f5e-4d7c-9a49-2b1f5f0e9a1${n}`;
    const { db, driver } = recordingDb('mssql', (q) => {
      // uniqueidentifier values as tedious returns them with lowerCaseGuids (tediousConfig).
      if (q.sql.includes('"stock_items" WITH (UPDLOCK, ROWLOCK)')) {
        return rows(
          { book_id: book1, title: 'Dune', on_hand: 5, reserved: 1, updated_at: now },
          { book_id: book2, title: 'Emma', on_hand: 9, reserved: 0, updated_at: now },
        );
      }
      if (q.sql.includes('"order_cancellations"')) return rows({ order_id: order(7), book_id: null, cancelled_by: 'c7' });
      if (q.sql.startsWith('select'))
        return rows({
          order_id: order(4),
          book_id: book2,
          quantity: 1,
          reserved_by: 'msg-0',
          released_at: now,
        });
      if (q.sql.startsWith('update')) return affected(2);
      return affected(3);
    });
    const commands = [
      { orderId: order(1), bookId: book1, quantity: 3, messageId: 'm1' }, // 4 free -> reserved, 1 left
      { orderId: order(2), bookId: book1, quantity: 2, messageId: 'm2' }, // 1 left -> refused
      { orderId: order(3), bookId: book1, quantity: 1, messageId: 'm3' }, // 1 left -> reserved
      { orderId: order(4), bookId: book2, quantity: 2, messageId: 'm4' }, // a released reservation exists -> already-reserved
      { orderId: order(5), bookId: unknown, quantity: 1, messageId: 'm5' }, // no stock row
      { orderId: order(6), bookId: book2, quantity: 4, messageId: 'm6' }, // reserved
      { orderId: order(7), bookId: book2, quantity: 1, messageId: 'm7' }, // the whole order was cancelled before -> refused
    ];
    const outcomes = await db.transaction().execute((trx) => reserveStockBatch(trx, commands, now));
    assert.deepEqual(
      outcomes.map((o) => o.result),
      ['reserved', 'insufficient-stock', 'reserved', 'already-reserved', 'unknown-book', 'reserved', 'order-cancelled'],
    );
    assert.deepEqual(outcomes[6], { result: 'order-cancelled', orderId: order(7), bookId: book2, quantity: 1, cancelledBy: 'c7' });
    assert.deepEqual(outcomes[1], { result: 'insufficient-stock', orderId: order(2), bookId: book1, quantity: 2, available: 1 });
    assert.deepEqual(outcomes[3], {
      result: 'already-reserved',
      orderId: order(4),
      bookId: book2,
      quantity: 2,
      existing: { quantity: 1, reservedBy: 'msg-0', released: true },
    });

    const sent = driver.sent.map((s) => s.sql);
    assert.equal(sent.length, 6);
    assert.match(sent[0]!, /^DECLARE @result int = 0;\n(IF @result >= 0 EXEC @result = sp_getapplock .+\n){7}IF @result = -1 THROW 51222/);
    assert.deepEqual(
      driver.sent[0]!.parameters,
      commands.map((c) => `order:${c.orderId}`).sort(),
      'the orders locked first, in sorted order',
    );
    assert.match(
      sent[1]!,
      /^SELECT \* FROM "stock_items" WITH \(UPDLOCK, ROWLOCK\)\s+WHERE "book_id" IN \(@1, @2, @3\) ORDER BY "book_id"$/,
    );
    assert.deepEqual(driver.sent[1]!.parameters, [book1, book2, unknown].sort(), 'books locked in sorted order');
    assert.match(sent[3]!, /^select .+ from "order_cancellations" where "order_id" in \(@1, @2, @3, @4, @5, @6, @7\)/);
    assert.match(sent[4]!, /^insert into "stock_reservations" \(.+\) values \(@1, .+\), \(@8, .+\), \(@15, .+\)$/);
    assert.deepEqual([driver.sent[4]!.parameters[3], driver.sent[4]!.parameters[10], driver.sent[4]!.parameters[17]], ['m1', 'm3', 'm6']);
    assert.equal(
      sent[5],
      'update "stock_items" set "reserved" = reserved + case "book_id" when @1 then cast(@2 as integer) when @3 then cast(@4 as integer) end, "updated_at" = @5 where "book_id" in (@6, @7)',
    );
    assert.deepEqual(driver.sent[5]!.parameters.slice(0, 4), [book1, 4, book2, 4]);
    assertNoPostgresSyntax(driver.sent);
  });
});

describe('statements within the parameter limit (SQL Server refuses a request with more than 2,100)', () => {
  const SQL_SERVER_PARAMETER_LIMIT = 2100;
  const N = 200;
  const uuid = (prefix: string, i: number) => `${prefix}-4f2a-8a53-${String(i).padStart(12, '0')}`;
  const books = Array.from({ length: N }, (_, i) => uuid('0b7e1a9e-0d0b', i));
  const orders = Array.from({ length: N }, (_, i) => uuid('6f1c1d52-3f5e', i));
  const messageIds = Array.from({ length: N }, (_, i) => `msg-${String(i).padStart(3, '0')}`);

  /** Stock for every book locked, no reservation yet, and every update's row count as its CASE names. */
  const batchResponder: Responder = (q) => {
    if (/^select \* from "stock_items" (with \(updlock, rowlock\)|.* for update$)/is.test(q.sql)) {
      // SQL Server binds each book; PostgreSQL binds them as one array.
      return rows(...q.parameters.flat().map((b) => ({ book_id: String(b), title: 't', on_hand: 10, reserved: 0, updated_at: now })));
    }
    if (q.sql.startsWith('select')) return rows();
    if (q.sql.startsWith('update')) return affected((q.sql.match(/\bwhen\b/g) ?? []).length);
    if (q.sql.startsWith('with ')) {
      // PostgreSQL's deferred writes in one statement: each part's count, as its own statement would give.
      const counts: Record<string, number> = {};
      for (const [, name, part] of q.sql.matchAll(/(w\d+) as \((.*?) returning 1\)/g)) {
        // A part whose rows travel as JSON changes one row per element of that parameter.
        const json = /cast\(\$(\d+) as json\)/.exec(part!);
        counts[name!] =
          json !== null
            ? (JSON.parse(String(q.parameters[Number(json[1]) - 1])) as unknown[]).length
            : part!.startsWith('update')
              ? (part!.match(/\bwhen\b/g) ?? []).length || 1 // one row per CASE arm; one row by key
              : (part!.match(/\), \(/g) ?? []).length + 1;
      }
      return rows(counts);
    }
    // An insert changes one row per VALUES tuple.
    if (q.sql.startsWith('insert')) return affected((q.sql.match(/\), \(/g) ?? []).length + 1);
    return affected(1);
  };

  function assertWithinLimit(sent: readonly Sent[]): void {
    for (const s of sent) {
      assert.ok(s.parameters.length <= SQL_SERVER_PARAMETER_LIMIT, `${s.parameters.length} parameters in: ${s.sql.slice(0, 80)}…`);
    }
  }

  /** Every value appears in exactly one of the statements that match, `times` times there. */
  function assertEachInOneStatement(sent: readonly Sent[], pattern: RegExp, values: readonly unknown[], times = 1): number {
    const statements = sent.filter((s) => pattern.test(s.sql));
    assert.ok(statements.length > 0, `no statement matches ${String(pattern)}`);
    for (const value of values) {
      const holding = statements.map((s) => s.parameters.filter((p) => p === value).length).filter((n) => n > 0);
      assert.deepEqual(holding, [times], `${String(value)} in ${String(pattern)}: ${holding.length} statements`);
    }
    return statements.length;
  }

  test(`a group-commit batch of ${N} orders for ${N} books: claim, reserve, events, completion, each statement within the limit, every row once`, async () => {
    const { db, driver } = recordingDb('mssql', batchResponder);
    const items = messageIds.map((messageId, i) => ({
      data: { orderId: orders[i]!, bookId: books[i]!, quantity: 1 },
      key: { messageId, source: 'body' as const },
    }));
    await db.transaction().execute(async (trx) => {
      assert.equal(
        (
          await claimKeys(
            trx,
            messageIds.map((messageId) => ({ ...claim, messageId })),
          )
        ).size,
        N,
      );
      const writes = new DeferredWrites(trx);
      const outcomes = await orderPlacedCommand.runBatch!(trx, items, now, writes);
      assert.deepEqual(new Set(outcomes.map((o) => o.result)), new Set(['reserved']));
      const completions = messageIds.map((messageId, i) => ({ messageId, outcome: outcomes[i] }));
      await completeClaims(writes, trx, RESERVE_STOCK, completions, now);
      await writes.flush();
    });

    assertWithinLimit(driver.sent);
    assertEachInOneStatement(driver.sent, /^insert into "inbox"/, messageIds);
    assertEachInOneStatement(
      driver.sent,
      /sp_getapplock/,
      orders.map((o) => `order:${o}`),
    );
    assertEachInOneStatement(driver.sent, /^SELECT \* FROM "stock_items" WITH \(UPDLOCK, ROWLOCK\)/, books);
    assertEachInOneStatement(driver.sent, /^select .* from "stock_reservations"/, orders);
    assertEachInOneStatement(driver.sent, /^insert into "stock_reservations"/, messageIds);
    assertEachInOneStatement(driver.sent, /^update "stock_items" set "reserved" = reserved \+ case/, books, 2);
    const eventIds = messageIds.map((m, i) => stockEventId(RESERVE_STOCK, m, books[i]!));
    const eventInserts = assertEachInOneStatement(driver.sent, /^insert into "outbox"/, eventIds);
    assert.ok(eventInserts >= 2, `${N} events bind ${N * 12} parameters: more than one statement (${eventInserts})`);
    assertEachInOneStatement(driver.sent, /^update "inbox" set "completed_at"/, messageIds, 2);
    assertNoPostgresSyntax(driver.sent);
  });

  test('reserveStockBatch of 1,000 lines: locks, reservation lookups, inserts and the CASE update are split, each book once', async () => {
    const many = 1000;
    const bookIds = Array.from({ length: many }, (_, i) => uuid('3e0b4d2b-3a3e', i));
    const commands = bookIds.map((bookId, i) => ({ orderId: uuid('4f1c5e3c-4b4f', i), bookId, quantity: 2, messageId: `m-${i}` }));
    const { db, driver } = recordingDb('mssql', batchResponder);
    const outcomes = await db.transaction().execute((trx) => reserveStockBatch(trx, commands, now));
    assert.equal(outcomes.filter((o) => o.result === 'reserved').length, many, 'the row counts of the split update add up');
    assertWithinLimit(driver.sent);
    assertEachInOneStatement(driver.sent, /^SELECT \* FROM "stock_items" WITH \(UPDLOCK, ROWLOCK\)/, bookIds);
    assertEachInOneStatement(
      driver.sent,
      /^select .* from "stock_reservations"/,
      commands.map((c) => c.orderId),
    );
    assert.ok(
      assertEachInOneStatement(
        driver.sent,
        /^insert into "stock_reservations"/,
        commands.map((c) => c.messageId),
      ) >= 2,
    );
    assert.ok(assertEachInOneStatement(driver.sent, /^update "stock_items" set "reserved" = reserved \+ case/, bookIds, 2) >= 2);
    assertNoPostgresSyntax(driver.sent);
  });

  test('reserveStockBatch of 2,500 orders takes its order locks in two lock batches, each within the limit, every order once, in one sorted order', async () => {
    const many = Array.from({ length: 2500 }, (_, i) => uuid('4f1c5e3c-4b4f', (i * 7919) % 2500));
    const commands = many.map((orderId, i) => ({ orderId, bookId: books[i % N]!, quantity: 1, messageId: `m-${i}` }));
    const { db, driver } = recordingDb('mssql', batchResponder);
    await db.transaction().execute((trx) => reserveStockBatch(trx, commands, now));
    assertWithinLimit(driver.sent);
    const keys = many.map((o) => `order:${o}`);
    assert.equal(assertEachInOneStatement(driver.sent, /sp_getapplock/, keys), 2);
    const locked = driver.sent.filter((s) => s.sql.includes('sp_getapplock')).flatMap((s) => s.parameters);
    assert.deepEqual(locked, [...keys].sort(), 'the second batch goes on where the first stopped: one global order');
    assert.ok(
      driver.sent.slice(0, 2).every((s) => s.sql.includes('sp_getapplock')),
      'both lock batches before any stock row',
    );
  });

  test('releaseStockBatch of 2,500 whole-order cancellations: the reservation reads and the cancellations recorded stay within the limit, every order once', async () => {
    const many = Array.from({ length: 2500 }, (_, i) => uuid('5a2d6f4d-5c5a', i));
    const commands = many.map((orderId, i) => ({ orderId, messageId: `c-${i}` }));
    const { db, driver } = recordingDb('mssql', batchResponder);
    await db.transaction().execute((trx) => releaseStockBatch(trx, commands, now));
    assertWithinLimit(driver.sent);
    assert.ok(assertEachInOneStatement(driver.sent, /^select "order_id", "book_id", "quantity" from "stock_reservations"/, many) >= 2);
  });

  test('on PostgreSQL a batch matches its keys as arrays; one line binds each key as itself (its generic plan is kept)', async () => {
    const run = async (n: number) => {
      const postgres = recordingDb('postgres', batchResponder);
      const items = messageIds.slice(0, n).map((messageId, i) => ({
        data: { orderId: orders[i]!, bookId: books[i]!, quantity: 1 },
        key: { messageId, source: 'body' as const },
      }));
      await postgres.db.transaction().execute(async (trx) => {
        const writes = new DeferredWrites(trx);
        if (n === 1) await orderPlacedCommand.run(trx, items[0]!, now, writes);
        else await orderPlacedCommand.runBatch!(trx, items, now, writes);
        await writes.flush();
      });
      return postgres.driver.sent.map((s) => s.sql).filter((text) => /stock_items|stock_reservations/.test(text));
    };
    const [lock3, read3, writes3] = await run(3);
    assert.match(lock3!, /pg_advisory_xact_lock.* and "book_id" = any\(\$2\) order by "book_id" for update$/s);
    assert.match(read3!, /where "order_id" = any\(\$1\) and "book_id" = any\(\$2\)/);
    assert.match(writes3!, /"stock_items"\."book_id" = any\(/);
    assert.deepEqual(await run(4), [lock3, read3, writes3], 'four lines send the texts three did');
    const [lock1, read1, writes1] = await run(1);
    assert.match(lock1!, /pg_advisory_xact_lock.* and "book_id" = \$2 order by "book_id" for update$/s);
    assert.match(read1!, /where "order_id" = \$1 and "book_id" = \$2/);
    assert.doesNotMatch(read1! + writes1!, /any\(/);
  });

  test('long id lists (inbox lookups, outbox settlements) are split; on PostgreSQL the same batch stays one statement each', async () => {
    const ids = Array.from({ length: 2500 }, (_, i) => `id-${i}`);
    const mssql = recordingDb('mssql', () => rows());
    assert.deepEqual(await findInboxRecords(mssql.db, 'c', ids), []);
    await mssql.db.transaction().execute((trx) => markPublished(trx, ids, now));
    await recordPublishFailure(mssql.db, ids, 'nacked', now);
    assertWithinLimit(mssql.driver.sent);
    assert.ok(assertEachInOneStatement(mssql.driver.sent, /^select \* from "inbox"/, ids) >= 2);
    assert.ok(assertEachInOneStatement(mssql.driver.sent, /^update "outbox" set "published_at"/, ids) >= 2);
    assert.ok(assertEachInOneStatement(mssql.driver.sent, /^update "outbox" set "attempts"/, ids) >= 2);

    const postgres = recordingDb('postgres', batchResponder);
    const items = messageIds.map((messageId, i) => ({
      data: { orderId: orders[i]!, bookId: books[i]!, quantity: 1 },
      key: { messageId, source: 'body' as const },
    }));
    await postgres.db.transaction().execute(async (trx) => {
      const writes = new DeferredWrites(trx);
      await orderPlacedCommand.runBatch!(trx, items, now, writes);
      await writes.flush();
    });
    assert.deepEqual(
      postgres.driver.sent.map((s) => s.sql.split(' ').slice(0, 3).join(' ')),
      ['select * from', "select 'reservation' as", 'with w0 as'],
      'one statement for each step of the batch (order locks with stock locks, reservations with cancellations), then the writes together',
    );
    const writes = postgres.driver.sent.at(-1)!.sql;
    assert.deepEqual(
      [...writes.matchAll(/w\d+ as \((insert into "\w+"|update "\w+")/g)].map((m) => m[1]),
      ['insert into "stock_reservations"', 'update "stock_items"', 'insert into "outbox"'],
    );
  });

  test('claiming 1,800 outbox events of 600 books: the "older event outside the batch" check keeps each book whole in one statement', async () => {
    const keys = Array.from({ length: 600 }, (_, i) => uuid('1c8f2b0f-1e1c', i));
    const pending = keys.flatMap((key, k) =>
      [0, 1, 2].map((j) => ({
        seq: String(1 + k * 3 + j),
        id: uuid('2d9a3c1a-2f2d', k * 3 + j),
        type: STOCK_RESERVED,
        source: 'urn:bookstore:inventory',
        ordering_key: key.toUpperCase(),
        consumer: RESERVE_STOCK,
        causation_id: `msg-${k}`,
        data: '{}',
        occurred_at: now,
        published_at: null,
        attempts: 0,
        last_error: null,
        last_attempt_at: null,
      })),
    );
    const { db, driver } = recordingDb('mssql', (q) => (q.sql.startsWith('SELECT TOP') ? rows(...pending) : rows()));
    const claimed = await db.transaction().execute((trx) => claimPublishableEvents(trx, pending.length));
    assert.equal(claimed.length, pending.length, 'no older event outside the batch: every event is publishable');
    assertWithinLimit(driver.sent);
    const checks = driver.sent.filter((s) => s.sql.startsWith('select "ordering_key", min(seq)'));
    assert.ok(checks.length >= 2, `${keys.length} keys and ${pending.length} seqs: more than one statement`);
    for (const row of pending) {
      const holding = checks.filter((s) => s.parameters.includes(row.seq));
      assert.equal(holding.length, 1, `seq ${row.seq} in one statement`);
      assert.ok(holding[0]!.parameters.includes(row.ordering_key), `seq ${row.seq} travels with its book`);
    }
  });

  test("on PostgreSQL the relay's check and its marks are one text whatever the batch holds: keys, seqs and ids as arrays", async () => {
    const texts = async (n: number) => {
      const events = Array.from({ length: n }, (_, i) => ({
        seq: String(100 + i),
        id: uuid('3e0b4d2b-3a3e', i),
        type: STOCK_RESERVED,
        source: 'urn:bookstore:inventory',
        ordering_key: uuid('4f1c5e3c-4b4f', i % 3),
        consumer: RESERVE_STOCK,
        causation_id: `msg-${i}`,
        data: {},
        occurred_at: now,
        published_at: null,
        attempts: 0,
        last_error: null,
        last_attempt_at: null,
      }));
      const { db, driver } = recordingDb('postgres', (q) => (/for update skip locked$/.test(q.sql) ? rows(...events) : rows()));
      await db.transaction().execute(async (trx) => {
        const claimed = await claimPublishableEvents(trx, n);
        await markPublished(
          trx,
          claimed.map((e) => e.id),
          now,
        );
      });
      const sent = driver.sent.filter((q) => /"outbox"/.test(q.sql) && !/for update skip locked$/.test(q.sql));
      assert.equal(sent.length, 2, sent.map((q) => q.sql).join('\n'));
      assert.match(sent[0]!.sql, /"ordering_key" = any\(\$1\) and not \("seq" = any\(\$2\)\)/);
      assert.deepEqual(sent[0]!.parameters, [[...new Set(events.map((e) => e.ordering_key))], events.map((e) => e.seq)]);
      assert.match(sent[1]!.sql, /where "id" = any\(\$2\) and "published_at" is null$/);
      assert.deepEqual(sent[1]!.parameters, [now, events.map((e) => e.id)]);
      return sent.map((q) => q.sql);
    };
    assert.deepEqual(await texts(7), await texts(2), 'seven events send the texts two did');
  });
});
