import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import type { ReadableSpan } from '@opentelemetry/sdk-trace';
import type { FastifyInstance } from 'fastify';
import type { RowDataPacket } from 'mysql2/promise';
import { RESERVE_STOCK } from '../../src/inventory/order.commands.js';
import { createDatabase, type DatabaseHandle } from '../../src/schema/create-database.js';
import { mysqlTestDatabase, skipUnlessMysql, type MysqlTestDatabase } from '../support/mysql-databases.js';
import { eventually } from '../support/observe.js';
import { orderPlaced, placeOrder, seedBook, testApp } from '../support/fixtures.js';
import { SpanRecorder } from '../support/span-recorder.js';

/**
 * The database system a command's transaction span reports on MariaDB and MySQL: OpenTelemetry names
 * MariaDB `mariadb` and MySQL `mysql`. The database is opened by URL, as the service opens it, and the
 * expected name comes from the server's own `SELECT VERSION()`, asked on a connection of the test's.
 */

describe('the transaction span of a command names the MariaDB or MySQL server it ran on', { skip: skipUnlessMysql() }, () => {
  const recorder = new SpanRecorder();
  let target: MysqlTestDatabase;
  let database: DatabaseHandle;
  let app: FastifyInstance;
  let expected: string;

  before(async () => {
    recorder.start();
    target = await mysqlTestDatabase();
    const connection = await target.connect();
    try {
      const [rows] = await connection.query<RowDataPacket[]>('SELECT VERSION() AS version');
      expected = String(rows[0]?.['version']).includes('MariaDB') ? 'mariadb' : 'mysql';
    } finally {
      await connection.end();
    }
    database = await createDatabase(target.url, { lockTimeoutMs: 5000, poolMax: 4 });
    app = await testApp({ ...database, url: target.url });
  });
  after(async () => {
    await app?.close();
    await database?.close();
    await target?.drop();
    await recorder.stop();
  });

  test('db.system.name and db.system: mariadb on MariaDB, mysql on MySQL', async () => {
    const book = await seedBook(app, 10);
    const traceId = randomBytes(16).toString('hex');
    const message = orderPlaced(book, 2);
    const res = await placeOrder(app, message, { traceparent: `00-${traceId}-${randomBytes(8).toString('hex')}-01` });
    assert.equal(res.statusCode, 201, res.body);

    const spans = (): ReadableSpan[] => recorder.spans();
    const claimOf = (): ReadableSpan | undefined =>
      spans().find((s) => s.spanContext().traceId === traceId && s.name === `claim ${RESERVE_STOCK}`);
    const transactionOf = (claim: ReadableSpan): ReadableSpan | undefined =>
      spans().find(
        (s) => s.name === `transaction ${RESERVE_STOCK}` && s.links.some((l) => l.context.spanId === claim.spanContext().spanId),
      );
    assert.ok(
      await eventually(() => claimOf() !== undefined && transactionOf(claimOf()!) !== undefined),
      'the claim and its transaction span',
    );
    const claim = claimOf()!;
    assert.equal(claim.attributes['inbox.decision'], 'processed');
    const transaction = transactionOf(claim)!;
    assert.equal(transaction.attributes['db.system.name'], expected);
    assert.equal(transaction.attributes['db.system'], expected);
    assert.equal(transaction.attributes['db.operation.name'], 'transaction');
  });
});
