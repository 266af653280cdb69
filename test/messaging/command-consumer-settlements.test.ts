import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { PGlite } from '@electric-sql/pglite';
import Fastify, { type FastifyInstance } from 'fastify';
import { Kysely, PGliteDialect } from 'kysely';
import { Migrator } from 'kysely/migration';
import { Type } from 'typebox';
import { AMQP_CONSUMER_DEFAULTS, CommandConsumer, commandQueueArguments } from '../../src/adapters/amqp/index.js';
import { inbox } from '../../src/adapters/fastify/index.js';
import {
  EffectOutcomeUnknownError,
  inboxMigrations,
  type InboxTables,
  type TransactionalKind,
  type TwoPhaseKind,
} from '../../src/inbox/index.js';
import { amqpUrl, eventually, skipWithoutAmqp, TestBroker, uniqueTopology } from '../support/amqp.js';

/**
 * How the RabbitMQ adapter settles the deliveries a retry cannot mend, on a real broker with queues and
 * exchanges of this suite's own (deleted afterwards) and an inbox on PGlite, through the public entries:
 *
 * - a side effect that needs reconciliation: after the attempt whose outcome is unknown, the copy that
 *   meets the unsettled record is dead-lettered with a `dead_letters` row (reason needs-reconciliation),
 *   the record left for the operator; once settled, the message replayed is answered from the record;
 * - a command that keeps failing: counted in the default attempts header (x-inbox-attempts) on each
 *   requeued copy, and dead-lettered on the maxDeliveries-th, reason delivery-limit.
 */

const PrintLabel = Type.Object({ shipmentId: Type.String({ minLength: 1 }) }, { additionalProperties: false });
const Printed = Type.Object({ printerJob: Type.String() });

/** The printer: every call, and whether it answers. */
const printer = { calls: [] as string[], answers: false };

const printLabel: TwoPhaseKind<typeof PrintLabel, typeof Printed> = {
  kind: 'two-phase',
  consumer: 'shipping.print-label',
  name: 'PrintLabel',
  data: PrintLabel,
  outcome: Printed,
  resendIsSafe: false,
  perform: async ({ shipmentId }) => {
    printer.calls.push(shipmentId);
    if (!printer.answers) throw new EffectOutcomeUnknownError('no-answer', 'the printer did not answer within 5 s');
    return { printerJob: `job-${printer.calls.length}` };
  },
};

/** A command whose work always fails unexpectedly. */
const alwaysFailing: TransactionalKind<typeof PrintLabel, typeof Printed> = {
  kind: 'transaction',
  consumer: 'shipping.always-failing',
  name: 'AlwaysFailing',
  data: PrintLabel,
  outcome: Printed,
  run: async () => {
    throw new Error('the label stock is on fire');
  },
};

const quiet = { info: () => {}, warn: () => {}, error: () => {} };

describe('CommandConsumer: deliveries no retry can mend', { skip: skipWithoutAmqp }, () => {
  const topology = uniqueTopology();
  const prefix = topology.amqpDeadLetterQueue.replace(/\.dead-letter$/, '');
  const printQueue = `${prefix}.print-label`;
  const failingQueue = `${prefix}.failing`;
  const deadLetterExchange = topology.amqpDeadLetterExchange;
  const deadLetterQueue = topology.amqpDeadLetterQueue;
  let db: Kysely<InboxTables>;
  let app: FastifyInstance;
  let broker: TestBroker;
  let tap: string;
  const consumers: CommandConsumer[] = [];

  before(async () => {
    db = new Kysely<InboxTables>({ dialect: new PGliteDialect({ pglite: new PGlite() }) });
    const { error } = await new Migrator({ db, provider: { getMigrations: async () => inboxMigrations } }).migrateToLatest();
    if (error !== undefined) throw new Error('the migrations failed', { cause: error });
    app = Fastify();
    await app.register(inbox, { db, batch: { concurrency: 1 } });
    await app.ready();
    broker = await TestBroker.open(topology);
    tap = await broker.bindQueue(deadLetterExchange);
    for (const queue of [printQueue, failingQueue]) {
      await broker.channel.assertQueue(queue, { durable: true, arguments: commandQueueArguments({ deadLetterExchange }) });
    }
  });
  after(async () => {
    for (const consumer of consumers) await consumer.stop();
    for (const queue of [printQueue, failingQueue]) await broker?.channel.deleteQueue(queue).catch(() => {});
    await broker?.close();
    await app?.close();
    await db?.destroy();
  });

  async function started(
    queue: string,
    command: TwoPhaseKind<typeof PrintLabel, typeof Printed> | typeof alwaysFailing,
    maxDeliveries = 5,
  ) {
    const consumer = new CommandConsumer({
      url: amqpUrl!,
      queues: [{ queue, command }],
      runner: app.inbox.commands,
      deadLetterExchange,
      deadLetterQueue,
      retryDelayMs: 20,
      retryMaxDelayMs: 100,
      maxDeliveries,
      log: quiet,
    });
    consumers.push(consumer);
    await consumer.start();
    return consumer;
  }

  /** The message of this id, once it is on the dead-letter exchange (read through the suite's own bound queue). */
  const deadLettered = (messageId: string) =>
    eventually(`${messageId} on the dead-letter exchange`, async () => {
      for (let i = 0; i < 100; i++) {
        const message = await broker.channel.get(tap, { noAck: true });
        if (message === false) return undefined;
        if (message.properties.messageId === messageId) return message;
      }
      return undefined;
    });
  const deadLetterRows = (messageId: string) =>
    db.selectFrom('dead_letters').select(['consumer', 'reason', 'detail', 'payload']).where('message_id', '=', messageId).execute();

  test('needs reconciliation: a dead letter with its row, the record left in progress for the operator, then settled and replayed', async () => {
    const consumer = await started(printQueue, printLabel);
    const messageId = `print-${randomUUID()}`;
    const envelope = { messageId, data: { shipmentId: 's-1' } };
    broker.send(printQueue, envelope, { messageId });

    const copy = await deadLettered(messageId);
    // The attempt whose outcome is unknown was requeued (counted once); the copy met the unsettled record.
    assert.equal(copy.properties.headers?.[AMQP_CONSUMER_DEFAULTS.attemptsHeader], 1);
    assert.deepEqual(JSON.parse(copy.content.toString()), envelope);
    const rows = await eventually('the dead-letter row', async () => {
      const found = await deadLetterRows(messageId);
      return found.length > 0 ? found : undefined;
    });
    assert.deepEqual(
      rows.map((r) => [r.consumer, r.reason]),
      [['shipping.print-label', 'needs-reconciliation']],
    );
    assert.match(rows[0]!.detail ?? '', /did not record its outcome/);
    assert.deepEqual(rows[0]!.payload, envelope);
    assert.deepEqual(printer.calls, ['s-1'], 'printed once, never resent');
    const record = await app.inbox.store.find({ messageId, consumer: printLabel.consumer });
    assert.equal(record?.completedAt, null, 'left in progress for the operator');
    await eventually('nothing left in flight', async () =>
      consumer.inFlightCount === 0 && (await broker.depth(printQueue)) === 0 ? true : undefined,
    );

    // The operator finds the label in the printer's log, settles the record, and replays the message.
    const outcome = { printerJob: 'job-from-the-printer-log' };
    const attempt = { messageId, consumer: printLabel.consumer, attempts: record.attempts };
    assert.equal(await app.inbox.store.settle(attempt, { resolution: 'completed', outcome }, new Date()), true);
    broker.send(printQueue, envelope, { messageId });
    await eventually('the replayed message acked', async () =>
      consumer.inFlightCount === 0 && (await broker.depth(printQueue)) === 0 ? true : undefined,
    );
    assert.deepEqual(printer.calls, ['s-1'], 'not printed again');
    assert.equal((await deadLetterRows(messageId)).length, 1, 'no second dead letter');
    assert.deepEqual((await app.inbox.store.find({ messageId, consumer: printLabel.consumer }))?.outcome, outcome);
  });

  test('unexpected failures are counted in the default attempts header, then dead-lettered (reason delivery-limit)', async () => {
    assert.equal(AMQP_CONSUMER_DEFAULTS.attemptsHeader, 'x-inbox-attempts');
    await started(failingQueue, alwaysFailing, 3);
    const messageId = `fail-${randomUUID()}`;
    broker.send(failingQueue, { messageId, data: { shipmentId: 's-2' } }, { messageId });
    const copy = await deadLettered(messageId);
    assert.equal(copy.properties.headers?.[AMQP_CONSUMER_DEFAULTS.attemptsHeader], 2, 'two failed deliveries before the last');
    const rows = await deadLetterRows(messageId);
    assert.deepEqual(
      rows.map((r) => [r.consumer, r.reason]),
      [['shipping.always-failing', 'delivery-limit']],
    );
    assert.match(rows[0]!.detail ?? '', /failed on 3 deliveries; the last error: the label stock is on fire/);
  });
});
