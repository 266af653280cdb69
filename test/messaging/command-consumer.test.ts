import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import type { CommandExecutor } from '../../src/inbox/runner.js';
import type { MessageKey } from '../../src/inbox/message-key.js';
import { orderCancelledCommand, orderPlacedCommand } from '../../src/inventory/order.commands.js';
import { CommandConsumer, type DeliveryResult, type PoisonLetter } from '../../src/adapters/amqp/index.js';
import type { Logger } from '../../src/adapters/amqp/index.js';
import { eventually, skipWithoutAmqp, TestBroker, uniqueTopology } from '../support/amqp.js';

/**
 * The consumer on its own, as an adapter: a real broker, but no app and no database. Its options are
 * a recording logger, a runner that records what it is asked to run, and a dead-letter sink in memory.
 */

interface LogLine {
  level: 'info' | 'warn' | 'error';
  fields: Record<string, unknown>;
  message: string;
}

describe('AMQP command consumer, constructed directly', { skip: skipWithoutAmqp }, () => {
  const NOW = new Date('2026-01-02T03:04:05.000Z');
  const lines: LogLine[] = [];
  const executed: { consumer: string; key: MessageKey; data: unknown }[] = [];
  const settled: { queue: string; result: DeliveryResult }[] = [];
  const letters: PoisonLetter[] = [];
  /** Letters the sink refuses once each (as a database refuses text it cannot store), by reason. */
  const refuseOnce = new Set<string>();
  let broker: TestBroker;
  let consumer: CommandConsumer;
  let deadLettered: string;

  const log: Logger = {
    info: (fields, message) => lines.push({ level: 'info', fields: fields as Record<string, unknown>, message }),
    warn: (fields, message) => lines.push({ level: 'warn', fields: fields as Record<string, unknown>, message }),
    error: (fields, message) => lines.push({ level: 'error', fields: fields as Record<string, unknown>, message }),
  };
  const runner: CommandExecutor = {
    execute: async (def, key, data) => {
      executed.push({ consumer: def.consumer, key, data });
      return { kind: 'processed', outcome: {}, record: {} } as never;
    },
  };

  before(async () => {
    const topology = uniqueTopology();
    broker = await TestBroker.open(topology);
    deadLettered = await broker.bindQueue(topology.amqpDeadLetterExchange);
    consumer = new CommandConsumer({
      url: topology.amqpUrl!,
      deadLetterExchange: topology.amqpDeadLetterExchange,
      deadLetterQueue: topology.amqpDeadLetterQueue,
      queues: [
        { queue: topology.amqpOrderPlacedQueue, command: orderPlacedCommand },
        { queue: topology.amqpOrderCancelledQueue, command: orderCancelledCommand },
      ],
      prefetch: 4,
      retryDelayMs: 50,
      retryMaxDelayMs: 200,
      maxDeliveries: 3,
      maxBodyBytes: 64 * 1024,
      appId: 'bookstore-inventory-test',
      onSettled: (queue, result) => settled.push({ queue, result }),
      log,
      runner,
      producer: 'shop',
      now: () => NOW,
      deadLetters: async (letter) => {
        if (refuseOnce.delete(letter.reason)) throw new Error('invalid byte sequence for encoding "UTF8"');
        letters.push(letter);
        return String(letters.length);
      },
    });
    await consumer.start();
  });
  after(async () => {
    await consumer?.stop();
    await broker?.close();
  });

  test('a valid command runs under its key, scoped to the producer, and is acked with one log line', async () => {
    const queue = broker.topology.amqpOrderPlacedQueue;
    const messageId = `msg-${randomUUID()}`;
    const data = { orderId: randomUUID(), bookId: randomUUID(), quantity: 2 };
    broker.send(queue, { data }, { messageId });

    await eventually('the delivery settled', async () => settled.find((s) => s.queue === queue));
    assert.deepEqual(executed, [
      { consumer: orderPlacedCommand.consumer, key: { messageId: `shop ${messageId}`, source: 'amqp-message-id' }, data },
    ]);
    assert.deepEqual(settled, [{ queue, result: 'processed' }]);
    const line = lines.find((l) => l.message === 'command');
    assert.deepEqual(
      { ...line, fields: { ...line?.fields, durationMs: 0 } },
      {
        level: 'info',
        message: 'command',
        fields: {
          transport: 'amqp',
          queue,
          consumer: orderPlacedCommand.consumer,
          messageId: `shop ${messageId}`,
          keySource: 'amqp-message-id',
          result: 'processed',
          durationMs: 0,
        },
      },
    );
    assert.equal(await broker.depth(queue), 0);
  });

  test('a string with U+0000 is dead-lettered (invalid-request, where it sits), never run, and rejected to the exchange', async () => {
    const queue = broker.topology.amqpOrderCancelledQueue;
    const messageId = `nul-${randomUUID()}`;
    const content = Buffer.from(`{"messageId":"${messageId}","type":"order\\u0000cancelled","data":{"orderId":"${randomUUID()}"}}`);
    const before = executed.length;
    // The body is kept as bytes (it is not usable JSON): the letter is found by the message-id property,
    // in the producer's key space, as the message would have been recorded.
    broker.send(queue, content, { messageId });

    const letter = await eventually('the dead letter', async () => letters.find((l) => l.messageId === `shop ${messageId}`));
    assert.equal(executed.length, before);
    assert.equal(letter.reason, 'invalid-request');
    assert.equal(letter.detail, 'body/type contains a NUL (U+0000) character, which no text field accepts');
    assert.equal(letter.keySource, 'amqp-message-id');
    assert.equal(letter.consumer, orderCancelledCommand.consumer);
    assert.deepEqual(letter.payload, { base64: content.toString('base64'), bytes: content.length });
    assert.deepEqual(letter.receivedAt, NOW);
    const rejected = await eventually('the message on the dead-letter exchange', async () => {
      const [message] = await broker.drain(deadLettered);
      return message;
    });
    assert.equal(rejected.content.toString(), content.toString());
    assert.ok(
      lines.some((l) => l.level === 'warn' && l.message === 'poison message dead-lettered' && l.fields.messageId === `shop ${messageId}`),
    );
  });

  test('a letter whose payload the sink refuses is recorded again with the payload as bytes', async () => {
    const queue = broker.topology.amqpOrderPlacedQueue;
    const messageId = `bad-${randomUUID()}`;
    const body = { messageId, data: { orderId: randomUUID(), bookId: randomUUID(), quantity: 0 } };
    refuseOnce.add('invalid-request');
    broker.send(queue, body);

    const letter = await eventually('the dead letter', async () => letters.find((l) => l.messageId === `shop ${messageId}`));
    assert.equal(refuseOnce.size, 0);
    assert.equal(letter.detail, `the message does not match the ${queue} schema: body/data/quantity must be >= 1`);
    const content = Buffer.from(JSON.stringify(body));
    assert.deepEqual(letter.payload, { base64: content.toString('base64'), bytes: content.length });
  });
});
