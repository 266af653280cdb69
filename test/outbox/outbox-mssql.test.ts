import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  Kysely,
  MssqlAdapter,
  MssqlIntrospector,
  MssqlQueryCompiler,
  type CompiledQuery,
  type DatabaseConnection,
  type Driver,
  type QueryResult,
} from 'kysely';
import * as tedious from 'tedious';
import type { Database } from '../../src/schema/database.js';
import { mssqlResultPlugins } from '../../src/schema/mssql.js';
import { up } from '../../src/schema/migrations/0002-outbox.js';
import { STOCK_RESERVED } from '../../src/inventory/stock-events.js';
import { claimPublishableEvents, insertOutboxEvents, listOutboxEvents } from '../../src/outbox/outbox.repository.js';

/**
 * The outbox's SQL Server statements, by construction (no SQL Server here): the migration and the
 * repository run on Kysely's SQL Server compiler with a driver that records what would be sent.
 */

type Reply = QueryResult<unknown> | Error;

function recordingMssql(respond: (sql: string, index: number) => Reply | undefined = () => undefined) {
  const sent: { sql: string; parameters: readonly unknown[] }[] = [];
  const driver: Driver = {
    async init() {},
    async acquireConnection(): Promise<DatabaseConnection> {
      return {
        executeQuery: async <R>(compiled: CompiledQuery): Promise<QueryResult<R>> => {
          sent.push({ sql: compiled.sql, parameters: compiled.parameters });
          const reply = respond(compiled.sql, sent.length - 1) ?? { rows: [], numAffectedRows: 1n };
          if (reply instanceof Error) throw reply;
          return reply as QueryResult<R>;
        },
        streamQuery: () => {
          throw new Error('not used');
        },
      };
    },
    async beginTransaction() {},
    async commitTransaction() {},
    async rollbackTransaction() {},
    async releaseConnection() {},
    async destroy() {},
  };
  const db = new Kysely<Database>({
    dialect: {
      createAdapter: () => new MssqlAdapter(),
      createDriver: () => driver,
      createIntrospector: (k) => new MssqlIntrospector(k),
      createQueryCompiler: () => new MssqlQueryCompiler(),
    },
    // As openMssql builds it: the SQL Server instance parses JSON columns.
    plugins: mssqlResultPlugins(),
  });
  return { db, sent };
}

const now = new Date('2026-03-01T12:00:00.000Z');
const event = (id: string) => ({
  id,
  type: STOCK_RESERVED,
  source: 'urn:bookstore:inventory',
  orderingKey: 'b0000000-0000-4000-8000-000000000001',
  consumer: 'inventory.reserve-stock',
  causationId: `m-${id}`,
  data: { quantity: 1 },
  occurredAt: now,
});
const POSTGRES_ONLY = /\b(limit|returning|on conflict|jsonb|timestamptz|bigserial|uuid|for update|skip locked)\b|::|\$\d/i;

describe('outbox on SQL Server (compiled statements)', () => {
  test('migration: nonclustered primary key on the event id, clustered on the identity seq, filtered indexes, SQL Server types only', async () => {
    const { db, sent } = recordingMssql();
    await up(db);
    const statements = sent.map((s) => s.sql.replace(/\s+/g, ' ').trim());
    const table = statements.find((s) => /^CREATE TABLE outbox\b/.test(s));
    assert.ok(table, statements.join('\n'));
    assert.match(table, /seq bigint IDENTITY\(1,1\) NOT NULL/);
    assert.match(table, /id uniqueidentifier NOT NULL/);
    assert.match(table, /data nvarchar\(max\) NOT NULL/);
    assert.match(table, /CONSTRAINT outbox_pk PRIMARY KEY NONCLUSTERED \(id\)/);
    assert.ok(statements.includes('CREATE UNIQUE CLUSTERED INDEX outbox_clustered ON outbox (seq)'));
    assert.ok(
      statements.some((s) => /create index "outbox_pending" on "outbox" \("seq"\) where "published_at" is null/.test(s)),
      statements.join('\n'),
    );
    for (const s of statements) assert.doesNotMatch(s, POSTGRES_ONLY, s);
  });

  test('insert: one multi-row statement; on a duplicate key (2627) the rows go one by one and the present one is skipped', async () => {
    const duplicate = Object.assign(new tedious.RequestError('Violation of PRIMARY KEY constraint', 'EREQUEST'), { number: 2627 });
    const { db, sent } = recordingMssql((_sql, index) => (index === 0 || index === 2 ? duplicate : undefined));
    await db.transaction().execute((trx) => insertOutboxEvents(trx as never, [event('e1'), event('e2')]));
    assert.match(sent[0]!.sql, /^insert into "outbox" \(.*\) values \(.*\), \(.*\)$/);
    assert.equal(sent.length, 3, 'the batch, then each row alone (the first present: skipped)');
    for (const s of sent) assert.doesNotMatch(s.sql, POSTGRES_ONLY, s.sql);
    assert.deepEqual([sent[1]!.parameters[0], sent[2]!.parameters[0]], ['e1', 'e2']);
  });

  test('claim: TOP with ROWLOCK, UPDLOCK, READPAST in seq order, then the older pending event of each book outside the batch', async () => {
    const pending = (seq: string, id: string, causationId: string) => ({
      seq,
      id,
      type: STOCK_RESERVED,
      source: 's',
      ordering_key: 'B1',
      consumer: 'c',
      causation_id: causationId,
      data: '{"q":1}',
      occurred_at: now,
      published_at: null,
      attempts: 0,
      last_error: null,
      last_attempt_at: null,
    });
    // Event ids as tedious returns uniqueidentifier with lowerCaseGuids (tediousConfig); the data as nvarchar text.
    const rows = [pending('1', 'e1', 'm1'), pending('3', 'e3', 'm3')];
    const { db, sent } = recordingMssql((sql) =>
      /READPAST/.test(sql) ? { rows } : /min\(seq\)/.test(sql) ? { rows: [{ ordering_key: 'B1', next: '2' }] } : undefined,
    );
    const claimed = await db.transaction().execute((trx) => claimPublishableEvents(trx as never, 50));
    assert.match(
      sent[0]!.sql.replace(/\s+/g, ' '),
      /^SELECT TOP \(@1\) \* FROM "outbox" WITH \(ROWLOCK, UPDLOCK, READPAST\) WHERE "published_at" IS NULL ORDER BY "seq"$/,
    );
    assert.equal(sent[0]!.parameters[0], 50);
    assert.match(sent[1]!.sql, /"seq" not in \(@\d+, @\d+\)/);
    assert.deepEqual(
      claimed.map((e) => [e.id, e.orderingKey, e.data]),
      [['e1', 'b1', { q: 1 }]],
      'seq 3 waits for seq 2, held elsewhere; the ordering key read back lower-case, the data parsed',
    );
    for (const s of sent) assert.doesNotMatch(s.sql, POSTGRES_ONLY, s.sql);
  });

  test('listing pages with select top, not limit', async () => {
    const { db, sent } = recordingMssql();
    await listOutboxEvents(db, { state: 'failed', limit: 10 });
    assert.match(
      sent[0]!.sql,
      /^select top\(11\) \* from "outbox" where "published_at" is null and "last_error" is not null order by "seq"$/,
    );
  });
});
