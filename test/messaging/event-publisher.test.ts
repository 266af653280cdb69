import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { test } from 'node:test';
import type { ChannelModel, RecoveringChannelModel } from 'amqplib';
import fastify from 'fastify';
import type { AmqpConnectionOptions } from '../../src/adapters/amqp/index.js';
import { AmqpEventPublisher } from '../../src/messaging/event-publisher.js';
import type { OutboxEvent } from '../../src/outbox/outbox-event.js';

/**
 * The broker is outside the system, and "a connection replaced while a batch waits for its confirms"
 * cannot be staged on a real one at will: these connections are scripted. Each answers the calls the
 * publisher makes and records what it was asked.
 */
class ScriptedConnection {
  closed = false;
  readonly published: string[] = [];
  constructor(private readonly confirms: boolean) {}

  /** The ChannelModel the publisher's set-up receives. */
  model(): ChannelModel {
    const channel = Object.assign(new EventEmitter(), {
      assertExchange: async () => ({}),
      publish: (_exchange: string, _key: string, _body: Buffer, options: { messageId: string }, done: (error: unknown) => void) => {
        this.published.push(options.messageId);
        if (this.confirms) queueMicrotask(() => done(null));
        return true;
      },
    });
    const model = {
      createConfirmChannel: async () => channel,
      close: async () => {
        this.closed = true;
      },
    };
    return model as unknown as ChannelModel;
  }
}

function outboxEvent(id: string): OutboxEvent {
  return {
    id,
    type: 'stock.reserved',
    source: '/bookstore-inventory',
    orderingKey: 'book-1',
    consumer: 'reserve-stock',
    causationId: `msg-${id}`,
    data: { bookId: 'book-1' },
    occurredAt: new Date('2025-01-01T00:00:00Z'),
    seq: '1',
    publishedAt: null,
    attempts: 0,
    lastError: null,
    lastAttemptAt: null,
  };
}

test('a batch whose confirms never come closes the connection it went out on, not the one that replaced it meanwhile', async (t) => {
  const app = fastify({ logger: false });
  t.after(() => app.close());
  let setup: AmqpConnectionOptions['setup'] | undefined;
  const publisher = new AmqpEventPublisher({
    url: 'amqp://scripted',
    exchange: 'events',
    log: app.log,
    maxDelayMs: 100,
    appId: 'test',
    connect: async (options) => {
      setup = options.setup;
      return { close: async () => {} } as unknown as RecoveringChannelModel;
    },
  });
  await publisher.start();
  const stalled = new ScriptedConnection(false);
  await setup!(stalled.model());

  const pending = publisher.publish([outboxEvent('e1')], 50);
  // The connection is replaced while the batch waits: recovery runs set-up on the new one.
  const healthy = new ScriptedConnection(true);
  await setup!(healthy.model());
  const results = await pending;

  assert.deepEqual(stalled.published, ['e1']);
  assert.deepEqual(results, [{ id: 'e1', error: 'no publisher confirm within 50 ms' }]);
  assert.equal(stalled.closed, true, 'the connection that did not confirm is closed');
  assert.equal(healthy.closed, false, 'the newer connection stays open');

  // The healthy connection carries the retry.
  assert.deepEqual(await publisher.publish([outboxEvent('e1')], 1_000), [{ id: 'e1' }]);
  assert.deepEqual(healthy.published, ['e1']);
  await publisher.close();
});
