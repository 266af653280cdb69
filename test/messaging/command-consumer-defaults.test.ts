import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { PGlite } from '@electric-sql/pglite';
import Fastify, { type FastifyInstance } from 'fastify';
import { Kysely, PGliteDialect } from 'kysely';
import { Migrator } from 'kysely/migration';
import { Type } from 'typebox';
import { AMQP_CONSUMER_DEFAULTS, CommandConsumer, commandQueueArguments } from '../../src/adapters/amqp/index.js';
import { inbox } from '../../src/adapters/fastify/index.js';
import { loadConfig } from '../../src/config.js';
import { inboxMigrations, type InboxTables, type TransactionalKind } from '../../src/inbox/index.js';
import { amqpUrl, eventually, skipWithoutAmqp, TestBroker, uniqueTopology } from '../support/amqp.js';

/**
 * `new CommandConsumer({ url, queues, runner })` is a working consumer: every other option has its
 * exported default (AMQP_CONSUMER_DEFAULTS), dead letters go to the inbox's store, a kind needs no
 * normalize. On a real broker and an inbox on PGlite; the default dead-letter exchange and queue are
 * read through a queue of the test's own bound to that exchange, and deleted afterwards.
 */

interface Database extends InboxTables {
  labels: { message_id: string; shipment_id: string };
}
const CreateLabel = Type.Object({ shipmentId: Type.String({ minLength: 1 }) }, { additionalProperties: false });
const Created = Type.Object({ shipmentId: Type.String() });

const createLabel: TransactionalKind<typeof CreateLabel, typeof Created, Database> = {
  kind: 'transaction',
  consumer: 'shipping.create-label',
  name: 'CreateLabel',
  data: CreateLabel,
  outcome: Created,
  run: async (trx, { data, key }) => {
    await trx.insertInto('labels').values({ message_id: key.messageId, shipment_id: data.shipmentId }).execute();
    return { shipmentId: data.shipmentId };
  },
};

describe('CommandConsumer with its defaults', { skip: skipWithoutAmqp }, () => {
  const prefix = uniqueTopology().amqpDeadLetterQueue.replace(/\.dead-letter$/, '');
  const labelsQueue = `${prefix}.labels`;
  let db: Kysely<Database>;
  let app: FastifyInstance;
  let broker: TestBroker;
  let deadLettered: string;
  const consumers: CommandConsumer[] = [];

  before(async () => {
    db = new Kysely<Database>({ dialect: new PGliteDialect({ pglite: new PGlite() }) });
    const migrations = {
      ...inboxMigrations,
      '0001-labels': {
        up: (k: Kysely<unknown>) =>
          k.schema
            .createTable('labels')
            .addColumn('message_id', 'text', (c) => c.primaryKey())
            .addColumn('shipment_id', 'text')
            .execute(),
      },
    };
    const { error } = await new Migrator({ db, provider: { getMigrations: async () => migrations } }).migrateToLatest();
    if (error !== undefined) throw new Error('the migrations failed', { cause: error });
    app = Fastify();
    await app.register(inbox, { db, batch: { concurrency: 1 } });
    await app.ready();
    broker = await TestBroker.open(uniqueTopology());
    // The default dead-letter exchange, declared as the consumer declares it, and a queue of this test's bound to it.
    await broker.channel.assertExchange(AMQP_CONSUMER_DEFAULTS.deadLetterExchange, 'topic', { durable: true });
    deadLettered = await broker.bindQueue(AMQP_CONSUMER_DEFAULTS.deadLetterExchange);
    // The command queues as the consumer declares them, so a message sent before it connected is kept.
    for (const queue of [labelsQueue]) {
      await broker.channel.assertQueue(queue, { durable: true, arguments: commandQueueArguments({}) });
    }
  });
  after(async () => {
    for (const consumer of consumers) await consumer.stop();
    for (const queue of [labelsQueue]) await broker?.channel.deleteQueue(queue).catch(() => {});
    await broker?.close();
    await app?.close();
    await db?.destroy();
  });

  const labelRows = (messageId: string) => db.selectFrom('labels').selectAll().where('message_id', '=', messageId).execute();
  const deadLetterRows = (messageId: string) =>
    db.selectFrom('dead_letters').select(['consumer', 'reason', 'detail']).where('message_id', '=', messageId).execute();

  test('url, queues and runner are enough: a command is processed once, poison is dead-lettered to the store and the default exchange', async () => {
    const consumer = new CommandConsumer({
      url: amqpUrl!,
      queues: [{ queue: labelsQueue, command: createLabel }],
      runner: app.inbox.commands,
    });
    consumers.push(consumer);
    await consumer.start();
    const tapped = () => broker.channel.get(deadLettered, { noAck: true });

    const messageId = `m-${randomUUID()}`;
    broker.send(labelsQueue, { messageId, data: { shipmentId: 's-1' } });
    broker.send(labelsQueue, { messageId, data: { shipmentId: 's-1' } });
    await eventually('the label row', async () => ((await labelRows(messageId)).length > 0 ? true : undefined));
    await eventually('both copies settled', async () =>
      (await broker.depth(labelsQueue)) === 0 && consumer.inFlightCount === 0 ? true : undefined,
    );
    assert.deepEqual(await labelRows(messageId), [{ message_id: messageId, shipment_id: 's-1' }], 'processed once');
    const record = await db.selectFrom('inbox').select(['consumer', 'completed_at']).where('message_id', '=', messageId).execute();
    assert.equal(record.length, 1);
    assert.notEqual(record[0]!.completed_at, null);

    const poisonId = `poison-${randomBytes(4).toString('hex')}`;
    broker.send(labelsQueue, { messageId: poisonId, data: { shipmentId: 7 } }, { messageId: poisonId });
    const rows = await eventually('the dead-letter row', async () => {
      const found = await deadLetterRows(poisonId);
      return found.length > 0 ? found : undefined;
    });
    assert.deepEqual(
      rows.map((r) => [r.consumer, r.reason]),
      [['shipping.create-label', 'invalid-request']],
    );
    assert.match(rows[0]!.detail ?? '', /shipmentId must be string/);
    const copy = await eventually('the message on the default dead-letter exchange', async () => {
      for (let i = 0; i < 100; i++) {
        const message = await tapped();
        if (message === false) return undefined;
        if (message.properties.messageId === poisonId) return message;
      }
      return undefined;
    });
    assert.equal(copy.fields.exchange, AMQP_CONSUMER_DEFAULTS.deadLetterExchange);
    assert.equal((await broker.channel.checkQueue(AMQP_CONSUMER_DEFAULTS.deadLetterQueue)).queue, AMQP_CONSUMER_DEFAULTS.deadLetterQueue);
  });

  after(async () => {
    // The default dead-letter queue this suite's consumers declared on the shared broker.
    await broker?.channel.deleteQueue(AMQP_CONSUMER_DEFAULTS.deadLetterQueue).catch(() => {});
  });
});

describe('CommandConsumer options', () => {
  test('without deadLetters, a store, or a runner that has one, the constructor says what is missing', () => {
    const runner = { execute: () => Promise.reject(new Error('not called')) };
    assert.throws(
      () => new CommandConsumer({ url: 'amqp://127.0.0.1:1', queues: [], runner }),
      /CommandConsumer needs somewhere to record dead letters: pass deadLetters or store, or a runner with a store/,
    );
  });

  test("the bookstore's AMQP_* settings default to the adapter's defaults", () => {
    const config = loadConfig({});
    assert.deepEqual(
      {
        prefetch: config.amqpPrefetch,
        retryDelayMs: config.amqpRetryDelayMs,
        retryMaxDelayMs: config.amqpRetryMaxDelayMs,
        maxDeliveries: config.amqpMaxDeliveries,
        queueType: config.amqpQueueType,
      },
      {
        prefetch: AMQP_CONSUMER_DEFAULTS.prefetch,
        retryDelayMs: AMQP_CONSUMER_DEFAULTS.retryDelayMs,
        retryMaxDelayMs: AMQP_CONSUMER_DEFAULTS.retryMaxDelayMs,
        maxDeliveries: AMQP_CONSUMER_DEFAULTS.maxDeliveries,
        queueType: AMQP_CONSUMER_DEFAULTS.queueType,
      },
    );
  });
});
