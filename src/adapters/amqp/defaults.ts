/**
 * The AMQP command consumer's defaults: what `CommandConsumer` takes for an option left out, and what an
 * application's own settings for it may start from, so the two never disagree.
 */
export const AMQP_CONSUMER_DEFAULTS = Object.freeze({
  /** The exchange a message that can never succeed is dead-lettered to (declared by `start()`, a topic exchange). */
  deadLetterExchange: 'commands.dead-letter',
  /** The queue bound to the dead-letter exchange (declared by `start()`). */
  deadLetterQueue: 'commands.dead-letter',
  /** Deliveries held unacknowledged at once, across the consumer's queues. */
  prefetch: 32,
  /** The first wait before a failed delivery is requeued; it doubles while failures go on. */
  retryDelayMs: 1000,
  /** The longest wait before a requeue, and between two attempts to reconnect. */
  retryMaxDelayMs: 30_000,
  /** Deliveries of a message whose command fails unexpectedly before it is dead-lettered (reason delivery-limit). */
  maxDeliveries: 5,
  /** The command queues' type: classic, or quorum (replicated, with the broker's delivery cap). */
  queueType: 'classic',
  /** The largest message body read (Fastify's default body limit); a larger one is dead-lettered. */
  maxBodyBytes: 1_048_576,
  /** Names the connection in the broker's management UI and logs (`<appId> consumer`). */
  appId: 'inbox',
  /** The message header that counts a message's unexpected failures across requeues, replicas and restarts. */
  attemptsHeader: 'x-inbox-attempts',
});
