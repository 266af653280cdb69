import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { insertDeadLetter } from '../inbox/machinery.js';
import { CommandConsumer, DELIVERY_RESULTS } from '../adapters/amqp/index.js';
import { AmqpEventPublisher } from '../messaging/event-publisher.js';
import { OutboxRelay } from '../outbox/relay.js';
import { queuedCommands } from '../commands.js';

/** The AMQP side of the service, present only when AMQP_URL is set. */
export interface Messaging {
  readonly relay: OutboxRelay | undefined;
  readonly consumer: CommandConsumer | undefined;
  readonly publisher: AmqpEventPublisher | undefined;
}

declare module 'fastify' {
  interface FastifyInstance {
    messaging: Messaging;
  }
}

const APP_ID = 'bookstore-inventory';
/**
 * The header the consumer counts a message's unexpected failures in: the bookstore's name, which its
 * operators' tools and docs (README, docs/operations.md) read.
 */
const ATTEMPTS_HEADER = 'x-bookstore-attempts';

export interface MessagingOptions {
  /** Largest message body a command queue accepts; larger ones are dead-lettered. */
  maxBodyBytes: number;
}

/** The command consumer, its options from the app: the inbox's runner, its clock, the dead-letter table. */
function createConsumer(app: FastifyInstance, url: string, relay: OutboxRelay, options: MessagingOptions): CommandConsumer {
  const { config } = app;
  return new CommandConsumer({
    url,
    deadLetterExchange: config.amqpDeadLetterExchange,
    deadLetterQueue: config.amqpDeadLetterQueue,
    queues: queuedCommands(config),
    prefetch: config.amqpPrefetch,
    retryDelayMs: config.amqpRetryDelayMs,
    maxDeliveries: config.amqpMaxDeliveries,
    queueType: config.amqpQueueType,
    retryMaxDelayMs: config.amqpRetryMaxDelayMs,
    maxBodyBytes: options.maxBodyBytes,
    appId: APP_ID,
    attemptsHeader: ATTEMPTS_HEADER,
    onSettled: (queue, result) => {
      app.metrics.recordDelivery(queue, result);
      if (result === 'processed') relay.wake();
    },
    log: app.log,
    runner: app.commands,
    producer: config.amqpProducer,
    now: app.now,
    deadLetters: (letter) => insertDeadLetter(app.db, letter),
  });
}

/** The outbox relay: publishes the events the commands wrote, through the publisher. */
function createRelay(app: FastifyInstance, publisher: AmqpEventPublisher): OutboxRelay {
  const { config } = app;
  return new OutboxRelay({
    db: app.db,
    publisher,
    log: app.log,
    now: app.now,
    batchSize: config.outboxRelayBatchSize,
    intervalMs: config.outboxRelayIntervalMs,
    maxBackoffMs: config.outboxRelayMaxBackoffMs,
    publishTimeoutMs: config.outboxPublishTimeoutMs,
    onPublished: (n) => app.metrics.recordPublished(n),
    onFailed: (n) => app.metrics.recordPublishFailures(n),
  });
}

/**
 * RabbitMQ, when AMQP_URL is set: the outbox relay publishing events, and the command consumers
 * feeding the same inbox pipeline as HTTP. Both start once the app is ready (a broker that is down
 * delays nothing else: they reconnect in the background) and stop gracefully on close, before the
 * database pool closes. Without AMQP_URL nothing connects; outbox rows are still written, and a later
 * start with AMQP_URL publishes them.
 */
export const messaging = fp(
  async (app: FastifyInstance, options: MessagingOptions) => {
    const { config } = app;
    if (config.amqpUrl === undefined) {
      app.decorate('messaging', { relay: undefined, consumer: undefined, publisher: undefined } satisfies Messaging);
      return;
    }
    const publisher = new AmqpEventPublisher({
      url: config.amqpUrl,
      exchange: config.amqpExchange,
      log: app.log,
      maxDelayMs: config.outboxRelayMaxBackoffMs,
      appId: APP_ID,
    });
    const relay = createRelay(app, publisher);
    app.metrics.watchRelay(() => publisher.ready);
    const consumer = createConsumer(app, config.amqpUrl, relay, options);
    app.decorate('messaging', { relay, consumer, publisher } satisfies Messaging);
    // Every queue starts at zero for every settlement, so rate() works from the first scrape.
    for (const { queue } of queuedCommands(config)) {
      for (const result of DELIVERY_RESULTS) app.metrics.recordDelivery(queue, result, 0);
    }

    // A command processed over HTTP may have written events: publish them now rather than at the next poll.
    app.addHook('onResponse', (request, reply, done) => {
      if (request.routeOptions.config.consumer !== undefined && reply.statusCode === 201) relay.wake();
      done();
    });

    app.addHook('onReady', async () => {
      await publisher.start();
      relay.start();
      await consumer.start();
    });
    // preClose runs before the database's onClose: in-flight messages finish on an open pool.
    app.addHook('preClose', async () => {
      await consumer.stop();
      await relay.stop();
      await publisher.close();
    });
  },
  { name: 'messaging', dependencies: ['services', 'metrics'] },
);
