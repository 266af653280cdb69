import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import * as tarn from 'tarn';
import * as tedious from 'tedious';
import { createDatabase, type DatabaseHandle } from '../../src/schema/create-database.js';
import { renderError } from '../../src/http/error-handler.js';
import { postgresDatabase, type TestDatabaseHandle } from '../support/databases.js';
import {
  admin,
  inboxRows,
  json,
  orderPlaced,
  placeOrder,
  reservedOf,
  seedBook,
  testApp,
  type Problem,
  type Stock,
  holdStockRow,
} from '../support/fixtures.js';
import { sample, scrape } from '../operations/prometheus.js';

const request = { url: '/stock/0193a1b2-0000-7000-8000-000000000001?x=1' } as FastifyRequest;
const tediousError = (number: number, message: string) => Object.assign(new tedious.RequestError(message, 'EREQUEST'), { number });

/**
 * The database said "busy" or the pool said "full": a 503 the client can retry, each with its own
 * problem type, never a 500 and never "the database is unavailable".
 */
describe('database errors outside the claim, as problems', () => {
  for (const [label, error, slug] of [
    ['SQL Server lock timeout (1222) on a read', tediousError(1222, 'Lock request time out period exceeded.'), 'database-busy'],
    [
      'SQL Server deadlock victim (1205)',
      tediousError(1205, 'Transaction (Process ID 57) was deadlocked on lock resources'),
      'database-busy',
    ],
    ["Kysely's MSSQL driver: an array holding 1205", [tediousError(1205, 'deadlocked')], 'database-busy'],
    [
      'PostgreSQL lock_timeout (55P03)',
      Object.assign(new Error('canceling statement due to lock timeout'), { code: '55P03' }),
      'database-busy',
    ],
    ['PostgreSQL deadlock (40P01)', Object.assign(new Error('deadlock detected'), { code: '40P01' }), 'database-busy'],
    ['a full SQL Server pool (tarn)', new tarn.TimeoutError('operation timed out for an unknown reason'), 'overloaded'],
    ['a full PostgreSQL pool (pg-pool)', new Error('timeout exceeded when trying to connect'), 'overloaded'],
    [
      'a refused connection',
      Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' }),
      'database-unavailable',
    ],
  ] as const) {
    test(`${label}: 503 ${slug} with Retry-After`, () => {
      const rendered = renderError(error, request);
      assert.equal(rendered.body.status, 503);
      assert.equal(rendered.body.type, `/problems/${slug}`);
      assert.equal(rendered.headers['retry-after'], '2');
      assert.equal(rendered.body.retryAfterSeconds, 2);
      assert.equal(rendered.body.instance, '/stock/0193a1b2-0000-7000-8000-000000000001');
      assert.equal(rendered.body.detail, undefined, 'no driver message in the answer');
    });
  }

  test('an unknown failure is still a 500 internal-error', () => {
    assert.equal(renderError(new Error('boom'), request).body.type, '/problems/internal-error');
  });
});

describe(
  'busy and overloaded on PostgreSQL, through HTTP',
  { skip: postgresDatabase ? false : 'TEST_POSTGRES_URL is not set', timeout: 60_000 },
  () => {
    let database: TestDatabaseHandle;
    let app: FastifyInstance;
    // A second handle on the same database, short lock bound and a pool of one, for the service under test.
    let narrow: DatabaseHandle;
    let releaseHeld: (() => void) | undefined;

    before(async () => {
      database = await postgresDatabase!.open();
      narrow = await createDatabase(database.url, { lockTimeoutMs: 300, poolMax: 1, connectTimeoutMs: 300 });
      app = await testApp(
        { ...narrow, url: database.url },
        {
          config: { inboxPruneIntervalMs: 0, inboxLockTimeoutMs: 300 },
          testHooks: {
            beforeCommit: async () => {
              if (releaseHeld !== undefined) return;
              await new Promise<void>((resolve) => (releaseHeld = resolve));
            },
          },
        },
      );
    });
    after(async () => {
      releaseHeld?.();
      await app?.close();
      await narrow?.close();
      await database?.close();
    });

    test('PUT /stock on a row another transaction holds past the lock bound: 503 database-busy with Retry-After, then 200 once it is free', async () => {
      releaseHeld = () => {};
      const book = await seedBook(app, 10);
      const { release: unlock, done: holder } = await holdStockRow(database.db, book);
      const busy = await app.inject({ method: 'PUT', url: `/stock/${book}`, headers: admin, payload: { title: 'Dune', onHand: 12 } });
      unlock();
      await holder;
      assert.equal(busy.statusCode, 503, busy.body);
      assert.equal(json<Problem>(busy).type, '/problems/database-busy');
      assert.equal(busy.headers['retry-after'], '2');

      const retried = await app.inject({ method: 'PUT', url: `/stock/${book}`, headers: admin, payload: { title: 'Dune', onHand: 12 } });
      assert.equal(retried.statusCode, 200);
      assert.equal(json<Stock>(retried).onHand, 12);
    });

    test('an order for a book whose stock row another transaction holds past the lock bound: 503 database-busy (not 409 in-flight), nothing recorded; the retry once it is free gets 201', async () => {
      releaseHeld = () => {};
      const book = await seedBook(app, 10);
      const counted = async (result: string) =>
        sample(await scrape(app), 'inbox_commands_total', { consumer: 'inventory.reserve-stock', result }) ?? NaN;
      const [busyBefore, failedBefore] = [await counted('database-busy'), await counted('failed')];
      const { release: unlock, done: holder } = await holdStockRow(database.db, book);
      const message = orderPlaced(book, 2);
      const busy = await placeOrder(app, message);
      unlock();
      await holder;
      assert.equal(busy.statusCode, 503, busy.body);
      assert.equal(json<Problem>(busy).type, '/problems/database-busy');
      assert.equal(busy.headers['retry-after'], '2');
      assert.equal((await counted('database-busy')) - busyBefore, 1, 'counted as database-busy, which an alert tells from a fault');
      assert.equal((await counted('failed')) - failedBefore, 0, 'not as failed');
      assert.deepEqual(await inboxRows(database.db, message.messageId), [], 'the claim rolled back with the work');
      assert.equal(await reservedOf(database.db, book), 0);

      const retried = await placeOrder(app, message);
      assert.equal(retried.statusCode, 201, retried.body);
      assert.equal(await reservedOf(database.db, book), 2);
    });

    test('every pooled connection busy: a read answers 503 overloaded (not database-unavailable); served again once one frees', async () => {
      releaseHeld = undefined;
      const book = await seedBook(app, 10);
      // The command holds the pool's only connection inside its transaction (the seam waits).
      const command = placeOrder(app, orderPlaced(book, 1));
      for (let i = 0; i < 200 && releaseHeld === undefined; i++) await new Promise((r) => setTimeout(r, 10));
      assert.notEqual(releaseHeld, undefined, 'the command reached its commit and holds the connection');
      const stats = narrow.poolStats();
      assert.deepEqual([stats?.total, stats?.idle], [1, 0], 'the only connection is checked out');

      const read = await app.inject({ url: `/stock/${book}` });
      assert.equal(read.statusCode, 503, read.body);
      assert.equal(json<Problem>(read).type, '/problems/overloaded');
      assert.equal(read.headers['retry-after'], '2');

      releaseHeld!();
      assert.equal((await command).statusCode, 201);
      const after = await app.inject({ url: `/stock/${book}` });
      assert.equal(after.statusCode, 200);
      assert.equal(json<Stock>(after).reserved, 1);
    });
  },
);
