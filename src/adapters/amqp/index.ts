/**
 * The inbox's RabbitMQ adapter: a consumer of command queues that runs every delivery through the same
 * executor as HTTP (src/inbox/runner.ts), acks after the commit, dead-letters poison. See docs/inbox.md.
 */
export {
  CommandConsumer,
  commandQueueArguments,
  type CommandConsumerOptions,
  type CommandQueue,
  type DeadLetterSink,
  DELIVERY_RESULTS,
  type DeliveryResult,
  type PoisonLetter,
} from './command-consumer.js';
export { AMQP_CLOSE_TIMEOUT_MS, closeWithin, openAmqpConnection, redactAmqpUrl, type AmqpConnectionOptions } from './amqp-connection.js';
export { AMQP_CONSUMER_DEFAULTS } from './defaults.js';
export { consoleLogger, type Logger } from './logger.js';
