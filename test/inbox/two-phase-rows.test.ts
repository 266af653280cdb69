import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { PGlite } from '@electric-sql/pglite';
import Fastify, { type FastifyInstance } from 'fastify';
import { Kysely, PGliteDialect } from 'kysely';
import { Migrator, type Migration } from 'kysely/migration';
import { Type } from 'typebox';
import { inbox } from '../../src/adapters/fastify/index.js';
import { EffectOutcomeUnknownError, inboxMigrations, type InboxTables, type TwoPhaseKind } from '../../src/inbox/index.js';

/**
 * A kind that performs a side effect and writes rows: a two-phase kind's `record` writes what the
 * effect's outcome leads to in the transaction that records the outcome, so the rows and the outcome
 * commit together, once, and never without the effect. Through the public entries, on PGlite.
 */

interface Database extends InboxTables {
  labels: { shipment_id: string; printer_job: string; message_id: string };
}

const PrintLabel = Type.Object({ shipmentId: Type.String({ minLength: 1 }) }, { additionalProperties: false });
const Printed = Type.Object({ printerJob: Type.String() });

/** The printer's calls, and what it does with the next one. */
const printer = { calls: [] as string[], next: 'print' as 'print' | 'no-answer' };

const printLabel: TwoPhaseKind<typeof PrintLabel, typeof Printed, Database> = {
  kind: 'two-phase',
  consumer: 'shipping.print-label',
  name: 'PrintLabel',
  data: PrintLabel,
  outcome: Printed,
  resendIsSafe: true,
  perform: async ({ shipmentId }) => {
    printer.calls.push(shipmentId);
    const what = printer.next;
    printer.next = 'print';
    if (what === 'no-answer') throw new EffectOutcomeUnknownError('no-answer', 'the printer did not answer within 5 s');
    return { printerJob: `job-${printer.calls.length}` };
  },
  record: async (trx, { data, key }, outcome) => {
    await trx
      .insertInto('labels')
      .values({ shipment_id: data.shipmentId, printer_job: outcome.printerJob, message_id: key.messageId })
      .execute();
  },
};

const migrations: Record<string, Migration> = {
  ...inboxMigrations,
  '0001-labels': {
    up: (db) =>
      db.schema
        .createTable('labels')
        .addColumn('shipment_id', 'text', (c) => c.primaryKey())
        .addColumn('printer_job', 'text')
        .addColumn('message_id', 'text')
        .execute(),
  },
};

describe('a two-phase kind that writes rows from its outcome', () => {
  let db: Kysely<Database>;
  let app: FastifyInstance;

  before(async () => {
    db = new Kysely<Database>({ dialect: new PGliteDialect({ pglite: new PGlite() }) });
    const { error } = await new Migrator({ db, provider: { getMigrations: async () => migrations } }).migrateToLatest();
    if (error !== undefined) throw new Error('the migrations failed', { cause: error });
    app = Fastify();
    await app.register(inbox, { db, batch: { concurrency: 1 } });
    app.inbox.command(printLabel, { url: '/labels/print' });
    await app.ready();
  });
  after(async () => {
    await app?.close();
    await db?.destroy();
  });

  const send = (messageId: string, shipmentId: string) =>
    app.inject({ method: 'POST', url: '/labels/print', payload: { messageId, data: { shipmentId } } });
  const labels = (shipmentId: string) => db.selectFrom('labels').selectAll().where('shipment_id', '=', shipmentId).execute();
  const inboxRecord = (messageId: string) => app.inbox.store.find({ messageId, consumer: printLabel.consumer });

  test('the row commits with the outcome; a copy is answered from the record, nothing printed or written again', async () => {
    const first = await send('m-1', 's-1');
    assert.equal(first.statusCode, 201);
    const outcome = first.json<{ outcome: { printerJob: string } }>().outcome;
    assert.deepEqual(await labels('s-1'), [{ shipment_id: 's-1', printer_job: outcome.printerJob, message_id: 'm-1' }]);
    assert.deepEqual((await inboxRecord('m-1'))?.outcome, outcome);

    const calls = printer.calls.length;
    const copy = await send('m-1', 's-1');
    assert.equal(copy.statusCode, 200);
    assert.deepEqual(copy.json<{ outcome: unknown }>().outcome, outcome);
    assert.equal(printer.calls.length, calls);
    assert.equal((await labels('s-1')).length, 1);
  });

  test('an effect whose outcome is unknown writes no row', async () => {
    printer.next = 'no-answer';
    const response = await send('m-2', 's-2');
    assert.equal(response.statusCode, 502);
    assert.deepEqual(await labels('s-2'), []);
    assert.equal((await inboxRecord('m-2'))?.completedAt, null);
  });

  test('rows that cannot be written leave no outcome: the record stays in progress, as after a crash', async () => {
    // Another message already labelled shipment s-1: the row's primary key refuses a second.
    const response = await send('m-3', 's-1');
    assert.equal(response.statusCode, 500);
    assert.deepEqual(
      (await labels('s-1')).map((row) => row.message_id),
      ['m-1'],
    );
    const record = await inboxRecord('m-3');
    assert.equal(record?.completedAt, null);
    assert.equal(record?.outcome, null);
    assert.notEqual(record?.leaseUntil, null);
  });
});
