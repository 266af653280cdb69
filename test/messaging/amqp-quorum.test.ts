import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { connect, type Channel, type ChannelModel } from 'amqplib';
import { createDatabase } from '../../src/schema/create-database.js';
import { amqpUrl, eventually, skipWithoutAmqp, uniqueTopology, type AmqpConfig } from '../support/amqp.js';
import { postgresDatabase } from '../support/databases.js';
import { holdStockRow, orderPlaced, reservedOf, seedBook, testApp } from '../support/fixtures.js';
import { sample, scrape } from '../operations/prometheus.js';

/**
 * AMQP_QUEUE_TYPE=quorum against a real RabbitMQ, in a vhost of the test's own (rabbitmqctl, when it reaches
 * the broker; otherwise queues of the test's own names in the URL's vhost): the service declares its command
 * queues as quorum queues with the broker's delivery cap (x-delivery-limit = AMQP_MAX_DELIVERIES), a message
 * whose consumer keeps dying with it unsettled goes to the dead-letter exchange, and an outage (a busy
 * database here) never uses up that cap.
 */

const run = promisify(execFile);

async function rabbitmqctl(...args: string[]): Promise<boolean> {
  return run('rabbitmqctl', ['-q', ...args], { timeout: 30_000 }).then(
    () => true,
    () => false,
  );
}

/** A vhost of this test's own on the broker, or undefined when rabbitmqctl does not reach it. */
async function ownVhost(): Promise<{ url: string; drop: () => Promise<void> } | undefined> {
  const name = `test-quorum-${randomBytes(4).toString('hex')}`;
  if (!(await rabbitmqctl('add_vhost', name))) return undefined;
  const user = decodeURIComponent(new URL(amqpUrl!).username || 'guest');
  if (!(await rabbitmqctl('set_permissions', '-p', name, user, '.*', '.*', '.*'))) {
    await rabbitmqctl('delete_vhost', name);
    return undefined;
  }
  const url = new URL(amqpUrl!);
  url.pathname = `/${encodeURIComponent(name)}`;
  return { url: url.toString(), drop: async () => void (await rabbitmqctl('delete_vhost', name)) };
}

const skip = skipWithoutAmqp || (postgresDatabase === undefined ? 'needs TEST_POSTGRES_URL' : false);
const fast = { amqpRetryDelayMs: 50, amqpRetryMaxDelayMs: 200, outboxRelayIntervalMs: 100, amqpQueueType: 'quorum' as const };

describe('quorum command queues (AMQP_QUEUE_TYPE=quorum)', { skip }, () => {
  let url: string;
  let dropVhost: (() => Promise<void>) | undefined;
  let model: ChannelModel;

  before(async () => {
    const vhost = await ownVhost();
    url = vhost?.url ?? amqpUrl!;
    dropVhost = vhost?.drop;
    model = await connect(url);
    model.on('error', () => {});
  });
  after(async () => {
    await model?.close().catch(() => {});
    await dropVhost?.();
  });

  /** A channel whose errors (a refused declaration closes it) are answered on the call, not raised. */
  async function channel(): Promise<Channel> {
    const ch = await model.createChannel();
    ch.on('error', () => {});
    return ch;
  }

  /** Waits until the service has declared its order-placed queue (a message sent before would be dropped). */
  async function declared(topology: AmqpConfig): Promise<void> {
    await eventually('the queue declared', async () => {
      const probe = await channel();
      return probe.checkQueue(topology.amqpOrderPlacedQueue).then(() => probe.close().then(() => true));
    });
  }

  /** A queue of the test's own bound to the dead-letter exchange: what reaches it was dead-lettered. */
  async function deadLetterTap(topology: AmqpConfig): Promise<{ ch: Channel; queue: string }> {
    const ch = await channel();
    await ch.assertExchange(topology.amqpDeadLetterExchange, 'topic', { durable: true });
    const { queue } = await ch.assertQueue('', { exclusive: true });
    await ch.bindQueue(queue, topology.amqpDeadLetterExchange, '#');
    return { ch, queue };
  }

  test('the command queues are quorum queues capped at AMQP_MAX_DELIVERIES; an order sent twice reserves once', async (t) => {
    const database = await postgresDatabase!.open();
    t.after(() => database.close());
    const topology = uniqueTopology(url);
    const app = await testApp(database, { config: { ...topology, ...fast, amqpMaxDeliveries: 3 } });
    t.after(() => app.close());

    const ch = await channel();
    const quorum = { 'x-dead-letter-exchange': topology.amqpDeadLetterExchange, 'x-queue-type': 'quorum', 'x-delivery-limit': 3 };
    // The broker accepts a declaration only with the arguments the queue has: these, and no other.
    await ch.assertQueue(topology.amqpOrderPlacedQueue, { durable: true, arguments: quorum });
    await ch.assertQueue(topology.amqpOrderCancelledQueue, { durable: true, arguments: quorum });
    await ch.assertQueue(topology.amqpDeadLetterQueue, { durable: true, arguments: { 'x-queue-type': 'quorum' } });
    const classic = await channel();
    await assert.rejects(
      classic.assertQueue(topology.amqpOrderPlacedQueue, {
        durable: true,
        arguments: { 'x-dead-letter-exchange': topology.amqpDeadLetterExchange },
      }),
      /PRECONDITION_FAILED/,
      'a classic declaration of the same queue is refused',
    );

    const book = await seedBook(app, 10);
    const message = orderPlaced(book, 3);
    const body = Buffer.from(JSON.stringify(message));
    for (let i = 0; i < 2; i++) ch.sendToQueue(topology.amqpOrderPlacedQueue, body, { persistent: true, contentType: 'application/json' });
    const settled = async (result: string) =>
      sample(await scrape(app), 'amqp_command_deliveries_total', { queue: topology.amqpOrderPlacedQueue, result }) ?? 0;
    await eventually('both copies settled', async () =>
      (await settled('processed')) + (await settled('duplicate')) >= 2 ? true : undefined,
    );
    assert.equal(await settled('processed'), 1);
    assert.equal(await settled('duplicate'), 1);
    assert.equal(await reservedOf(database.db, book), 3, 'reserved once');
    assert.equal((await ch.checkQueue(topology.amqpOrderPlacedQueue)).messageCount, 0);
    for (const queue of [topology.amqpOrderPlacedQueue, topology.amqpOrderCancelledQueue, topology.amqpDeadLetterQueue]) {
      await ch.deleteQueue(queue);
    }
  });

  test('a message whose consumer dies with it unsettled goes to the dead-letter exchange once the cap is passed', async (t) => {
    const database = await postgresDatabase!.open();
    t.after(() => database.close());
    const topology = uniqueTopology(url);
    const limit = 2;
    // The service declares the queues, then stops: a consumer that dies holding the message stands in for it.
    const app = await testApp(database, { config: { ...topology, ...fast, amqpMaxDeliveries: limit } });
    const publisher = await channel();
    await declared(topology);
    await app.close();
    const tap = await deadLetterTap(topology);
    const message = orderPlaced('6f1c1f8e-8e0b-4d53-9a55-0d0c3b1f2a10', 1);
    publisher.sendToQueue(topology.amqpOrderPlacedQueue, Buffer.from(JSON.stringify(message)), { persistent: true });

    let deliveries = 0;
    for (let attempt = 0; attempt < 20; attempt++) {
      const ch = await channel();
      const got = await ch.get(topology.amqpOrderPlacedQueue, { noAck: false });
      if (got === false) {
        await ch.close();
        if ((await publisher.checkQueue(tap.queue)).messageCount > 0) break;
        await sleep(100);
        continue;
      }
      deliveries++;
      // Closed with the message unsettled, as a consumer killed mid-message: the broker takes it back.
      await ch.close();
    }
    const letter = await eventually('the dead letter', async () => {
      const got = await tap.ch.get(tap.queue, { noAck: true });
      return got === false ? undefined : got;
    });
    assert.equal((JSON.parse(letter.content.toString()) as { messageId: string }).messageId, message.messageId);
    assert.equal(letter.properties.headers?.['x-first-death-reason'], 'delivery_limit');
    assert.equal(deliveries, limit + 1, 'delivered once, then returned as often as the cap allows');
    assert.equal((await publisher.checkQueue(topology.amqpOrderPlacedQueue)).messageCount, 0);
    for (const queue of [topology.amqpOrderPlacedQueue, topology.amqpOrderCancelledQueue, topology.amqpDeadLetterQueue]) {
      await publisher.deleteQueue(queue);
    }
  });

  test('a busy database requeues the message more often than the cap allows; the broker never dead-letters it, it applies once', async (t) => {
    const database = await postgresDatabase!.open();
    t.after(() => database.close());
    const narrow = await createDatabase(database.url, { lockTimeoutMs: 200, poolMax: 4 });
    t.after(() => narrow.close());
    const topology = uniqueTopology(url);
    const tap = await deadLetterTap(topology);
    const app = await testApp(
      { ...narrow, url: database.url },
      { config: { ...topology, ...fast, amqpMaxDeliveries: 1, inboxLockTimeoutMs: 200 } },
    );
    t.after(() => app.close());
    const requeued = async () =>
      sample(await scrape(app), 'amqp_command_deliveries_total', { queue: topology.amqpOrderPlacedQueue, result: 'requeued' }) ?? 0;
    const book = await seedBook(app, 10);
    const { release: unlock, done: holder } = await holdStockRow(database.db, book);
    const message = orderPlaced(book, 4);
    const ch = await channel();
    await declared(topology);
    ch.sendToQueue(topology.amqpOrderPlacedQueue, Buffer.from(JSON.stringify(message)), { persistent: true });
    try {
      await eventually('three requeues', async () => ((await requeued()) >= 3 ? true : undefined), 10_000);
    } finally {
      unlock();
      await holder;
    }
    await eventually('the reservation', async () => ((await reservedOf(database.db, book)) === 4 ? true : undefined), 20_000);
    assert.equal((await tap.ch.checkQueue(tap.queue)).messageCount, 0, 'nothing reached the dead-letter exchange');
    const letters = await database.db.selectFrom('dead_letters').selectAll().where('message_id', '=', message.messageId).execute();
    assert.equal(letters.length, 0);
    await app.close();
    for (const queue of [topology.amqpOrderPlacedQueue, topology.amqpOrderCancelledQueue, topology.amqpDeadLetterQueue]) {
      await ch.deleteQueue(queue);
    }
  });
});
