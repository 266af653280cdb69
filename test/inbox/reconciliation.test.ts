import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { PGlite } from '@electric-sql/pglite';
import Fastify, { type FastifyInstance } from 'fastify';
import { Kysely, PGliteDialect } from 'kysely';
import { Migrator } from 'kysely/migration';
import { Type } from 'typebox';
import { inbox } from '../../src/adapters/fastify/index.js';
import { EffectOutcomeUnknownError, inboxMigrations, type Attempt, type InboxTables, type TwoPhaseKind } from '../../src/inbox/index.js';

/**
 * An operator settles a record that needs reconciliation through the public entry: `store.settle`, tied
 * to the attempt read, as completed with the operator's outcome (later copies are answered with it, the
 * effect is not performed again) or released (the next copy performs it). A two-phase kind on PGlite,
 * behind the Fastify adapter, whose receiver answers nothing the first time.
 */

const PrintLabel = Type.Object({ shipmentId: Type.String({ minLength: 1 }) }, { additionalProperties: false });
const Printed = Type.Object({ printerJob: Type.String() });

/** The printer's calls, and what it does with the next one. */
const printer = { calls: [] as { shipmentId: string; attempt: Attempt }[], next: 'print' as 'print' | 'no-answer' | 'crash' };

const printLabel: TwoPhaseKind<typeof PrintLabel, typeof Printed> = {
  kind: 'two-phase',
  consumer: 'shipping.print-label',
  name: 'PrintLabel',
  data: PrintLabel,
  outcome: Printed,
  resendIsSafe: false,
  perform: async ({ shipmentId }, attempt) => {
    printer.calls.push({ shipmentId, attempt });
    const what = printer.next;
    printer.next = 'print';
    if (what === 'no-answer') throw new EffectOutcomeUnknownError('no-answer', 'the printer did not answer within 5 s');
    if (what === 'crash') throw new Error('the process lost the printer mid-call');
    return { printerJob: `job-${printer.calls.length}` };
  },
};

describe('settling a needs-reconciliation record through the public store', () => {
  let db: Kysely<InboxTables>;
  let app: FastifyInstance;
  let clock = new Date('2026-12-02T10:00:00Z');

  before(async () => {
    db = new Kysely<InboxTables>({ dialect: new PGliteDialect({ pglite: new PGlite() }) });
    const { error } = await new Migrator({ db, provider: { getMigrations: async () => inboxMigrations } }).migrateToLatest();
    if (error !== undefined) throw new Error('the migrations failed', { cause: error });
    app = Fastify();
    await app.register(inbox, { db, leaseMs: 60_000, now: () => clock, batch: { concurrency: 1 } });
    app.inbox.command(printLabel, { url: '/labels/print' });
    await app.ready();
  });
  after(async () => {
    await app?.close();
    await db?.destroy();
  });

  const send = (messageId: string, shipmentId: string) =>
    app.inject({ method: 'POST', url: '/labels/print', payload: { messageId, data: { shipmentId } } });
  const key = (messageId: string) => ({ messageId, consumer: printLabel.consumer });

  /** A message whose first attempt got no answer from the printer: the record needs reconciliation. */
  async function unsettled(messageId: string, shipmentId: string) {
    printer.next = 'no-answer';
    assert.equal((await send(messageId, shipmentId)).statusCode, 502);
    const again = await send(messageId, shipmentId);
    assert.equal(again.statusCode, 409);
    assert.equal(again.json<{ type: string }>().type, '/problems/needs-reconciliation');
    const record = await app.inbox.store.find(key(messageId));
    assert.ok(record !== undefined && record.completedAt === null, 'in progress');
    return record;
  }

  test("completed: the operator's outcome is recorded, and a later copy is answered with it without printing", async () => {
    const read = await unsettled('m-completed', 's-1');
    const calls = printer.calls.length;
    const outcome = { printerJob: 'job-found-in-the-printer-log' };
    const settled = await app.inbox.store.settle(
      { ...key('m-completed'), attempts: read.attempts },
      { resolution: 'completed', outcome },
      clock,
    );
    assert.equal(settled, true);

    const record = await app.inbox.store.find(key('m-completed'));
    assert.deepEqual(record?.outcome, outcome);
    assert.deepEqual(record?.completedAt, clock);
    const copy = await send('m-completed', 's-1');
    assert.equal(copy.statusCode, 200);
    assert.equal(copy.headers['idempotent-replayed'], 'true');
    assert.deepEqual(copy.json<{ outcome: unknown }>().outcome, outcome);
    assert.equal(printer.calls.length, calls, 'not printed again');

    // Settled once: settling it again changes nothing.
    const again = await app.inbox.store.settle({ ...key('m-completed'), attempts: read.attempts }, { resolution: 'released' }, clock);
    assert.equal(again, false);
    assert.deepEqual((await app.inbox.store.find(key('m-completed')))?.outcome, outcome);
  });

  test('released: the record is gone, and the next copy prints under the same downstream key', async () => {
    const read = await unsettled('m-released', 's-2');
    const settled = await app.inbox.store.settle({ ...key('m-released'), attempts: read.attempts }, { resolution: 'released' }, clock);
    assert.equal(settled, true);
    assert.equal(await app.inbox.store.find(key('m-released')), undefined);

    const copy = await send('m-released', 's-2');
    assert.equal(copy.statusCode, 201);
    const last = printer.calls.at(-1)!;
    assert.equal(last.shipmentId, 's-2');
    assert.equal(last.attempt.downstreamKey, 'shipping.print-label:m-released');
    const record = await app.inbox.store.find(key('m-released'));
    assert.notEqual(record?.completedAt, null);
    assert.deepEqual(record?.outcome, copy.json<{ outcome: unknown }>().outcome);
    assert.deepEqual(record?.outcome, { printerJob: `job-${printer.calls.length}` });
  });

  test('tied to the attempt: a settlement under another attempt count changes nothing', async () => {
    const read = await unsettled('m-stale', 's-3');
    const stale = { ...key('m-stale'), attempts: read.attempts + 1 };
    assert.equal(await app.inbox.store.settle(stale, { resolution: 'completed', outcome: { printerJob: 'x' } }, clock), false);
    assert.equal(await app.inbox.store.settle(stale, { resolution: 'released' }, clock), false);
    const record = await app.inbox.store.find(key('m-stale'));
    assert.equal(record?.completedAt, null);
    assert.equal(record?.attempts, read.attempts);
  });

  test('a record whose lease still runs (its attempt may still be printing) is not settled until the lease is over', async () => {
    printer.next = 'crash';
    const response = await send('m-leased', 's-4');
    assert.equal(response.statusCode, 500);
    const read = (await app.inbox.store.find(key('m-leased')))!;
    assert.ok(read.leaseUntil !== null && read.leaseUntil > clock, 'leased');
    const attempt = { ...key('m-leased'), attempts: read.attempts };
    assert.equal(await app.inbox.store.settle(attempt, { resolution: 'released' }, clock), false);
    assert.equal(await app.inbox.store.settle(attempt, { resolution: 'completed', outcome: { printerJob: 'x' } }, clock), false);
    assert.equal((await app.inbox.store.find(key('m-leased')))?.completedAt, null);

    clock = new Date(read.leaseUntil.getTime() + 1);
    const outcome = { printerJob: 'job-after-the-lease' };
    assert.equal(await app.inbox.store.settle(attempt, { resolution: 'completed', outcome }, clock), true);
    assert.deepEqual((await app.inbox.store.find(key('m-leased')))?.outcome, outcome);
  });
});
