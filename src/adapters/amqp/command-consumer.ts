import { context, SpanKind, SpanStatusCode, trace, type Span, type Tracer } from '@opentelemetry/api';
import {
  ATTR_MESSAGING_DESTINATION_NAME,
  ATTR_MESSAGING_MESSAGE_ID,
  ATTR_MESSAGING_OPERATION_NAME,
  ATTR_MESSAGING_OPERATION_TYPE,
  ATTR_MESSAGING_RABBITMQ_DESTINATION_ROUTING_KEY,
  ATTR_MESSAGING_SYSTEM,
  MESSAGING_OPERATION_TYPE_VALUE_PROCESS,
  MESSAGING_SYSTEM_VALUE_RABBITMQ,
} from '@opentelemetry/semantic-conventions/incubating';
import type { ChannelModel, ConfirmChannel, ConsumeMessage, RecoveringChannelModel } from 'amqplib';
import { isPassingFailure } from '../../db/dialect.js';
import type { CommandKind } from '../../inbox/kind.js';
import type { CommandExecutor } from '../../inbox/runner.js';
import type { InboxStore } from '../../inbox/store.js';
import { errorMessage, FingerprintMismatchError, InFlightError, NeedsReconciliationError, OverloadedError } from '../../inbox/errors.js';
import { scopeKey, type MessageKey } from '../../inbox/message-key.js';
import { activeTracer, extractTraceContext, INBOX_CONSUMER, INBOX_DECISION, INBOX_KEY } from '../../inbox/tracing.js';
import { closeWithin, openAmqpConnection } from './amqp-connection.js';
import { ChannelAcks } from './channel-acks.js';
import { AMQP_CONSUMER_DEFAULTS } from './defaults.js';
import { EnvelopeReader, messageKeyOf } from './command-envelope.js';
import { consoleLogger, type Logger } from './logger.js';
import { bodyOf, PoisonMessage, recordPoisonMessage, type DeadLetterSink, type PoisonLetter } from './poison-message.js';

export type { PoisonLetter, DeadLetterSink } from './poison-message.js';

/** How a delivery can be settled. */
export const DELIVERY_RESULTS = ['processed', 'duplicate', 'dead-lettered', 'requeued'] as const;
/** How a delivery was settled. */
export type DeliveryResult = (typeof DELIVERY_RESULTS)[number];

export interface CommandQueue {
  queue: string;
  command: CommandKind;
}

/** What a CommandConsumer needs: the broker, the queues and the inbox's executor; the rest has a default. */
export interface CommandConsumerOptions {
  url: string;
  queues: readonly CommandQueue[];
  /** Runs each command through the inbox: the executor HTTP's commands go through too (`app.inbox.commands`). */
  runner: CommandExecutor;
  /** The exchange a poison message is dead-lettered to (AMQP_CONSUMER_DEFAULTS.deadLetterExchange). */
  deadLetterExchange?: string;
  /** The queue bound to the dead-letter exchange (AMQP_CONSUMER_DEFAULTS.deadLetterQueue). */
  deadLetterQueue?: string;
  /** Deliveries held unacknowledged at once (AMQP_CONSUMER_DEFAULTS.prefetch). */
  prefetch?: number;
  /** The first wait before a failed delivery is requeued, doubling while failures go on (AMQP_CONSUMER_DEFAULTS.retryDelayMs). */
  retryDelayMs?: number;
  /** The longest wait before a requeue or a reconnect (AMQP_CONSUMER_DEFAULTS.retryMaxDelayMs). */
  retryMaxDelayMs?: number;
  /**
   * Deliveries that fail unexpectedly before the message is dead-lettered, reason delivery-limit
   * (AMQP_CONSUMER_DEFAULTS.maxDeliveries).
   */
  maxDeliveries?: number;
  /**
   * classic (the default), or quorum: the queues are replicated across the cluster's nodes and the
   * broker caps deliveries at maxDeliveries (x-delivery-limit) — a message whose consumer dies or loses
   * its connection with it unsettled that many times goes to the dead-letter exchange. On quorum queues
   * a transient failure puts a copy back and acks the original, so an outage never uses up that count.
   */
  queueType?: 'classic' | 'quorum';
  /** The largest message body read; a larger one is dead-lettered (AMQP_CONSUMER_DEFAULTS.maxBodyBytes). */
  maxBodyBytes?: number;
  /** Names the connection in the broker's management UI (AMQP_CONSUMER_DEFAULTS.appId). */
  appId?: string;
  /** The header counting a message's unexpected failures (AMQP_CONSUMER_DEFAULTS.attemptsHeader). */
  attemptsHeader?: string;
  /** Told about every settled delivery (metrics), and after a processed one (wakes the outbox relay). */
  onSettled?: (queue: string, result: DeliveryResult) => void;
  /** Where the consumer logs; default `consoleLogger` (warnings and errors to the console). */
  log?: Logger;
  /**
   * The producer the queues' messages are from: their keys are recorded in its key space. The broker's
   * permissions say who may publish to a queue. Default: none, keys are not scoped.
   */
  producer?: string | undefined;
  /** The clock dead letters are stamped with (default: the system clock). */
  now?: () => Date;
  /**
   * Records a poison message in the dead-letter table, resolving to its id. Default: the inbox's store
   * (`store`, or the runner's, as `app.inbox.commands` has), in its `dead_letters` table.
   */
  deadLetters?: DeadLetterSink;
  /** The inbox store whose `dead_letters` table takes poison messages, when the runner has none. */
  store?: InboxStore;
}

/** The options with every default applied. */
type ResolvedOptions = Required<Omit<CommandConsumerOptions, 'onSettled' | 'producer' | 'store'>> &
  Pick<CommandConsumerOptions, 'onSettled' | 'producer'>;

function resolveOptions(options: CommandConsumerOptions): ResolvedOptions {
  const store = options.store ?? options.runner.store;
  const deadLetters = options.deadLetters ?? (store === undefined ? undefined : (letter: PoisonLetter) => store.deadLetter(letter));
  if (deadLetters === undefined) {
    throw new TypeError('CommandConsumer needs somewhere to record dead letters: pass deadLetters or store, or a runner with a store');
  }
  // An option given as undefined takes its default, as one left out does.
  const given = Object.fromEntries(Object.entries(options).filter(([, value]) => value !== undefined)) as CommandConsumerOptions;
  return { ...AMQP_CONSUMER_DEFAULTS, log: consoleLogger, now: () => new Date(), ...given, deadLetters };
}

/**
 * Consumes the command queues: the same pipeline as HTTP (schema, key, inbox), another transport.
 *
 * Ack only after the command's transaction committed; a redelivered copy is a duplicate, acked with
 * nothing applied. A message that can never succeed (not JSON, not the schema, no usable key, a key
 * reused with another payload) goes to the dead-letter table and is rejected without requeue, to the
 * dead-letter exchange; so does one whose side effect needs reconciliation (reason
 * needs-reconciliation: only an operator can settle its record, then replay it). A transient failure (database down or busy, a copy in flight) is requeued after
 * a backoff that grows while failures go on. An unexpected failure is retried the same way but counted,
 * and dead-lettered (reason delivery-limit) on the maxDeliveries-th. Prefetch bounds the deliveries held.
 */
export class CommandConsumer {
  readonly #options: ResolvedOptions;
  readonly #log: Logger;
  readonly #envelopes: EnvelopeReader;
  #connection: RecoveringChannelModel | undefined;
  #channel: ConfirmChannel | undefined;
  #acks: ChannelAcks | undefined;
  #consumerTags: string[] = [];
  #stopping = false;
  readonly #inFlight = new Set<Promise<void>>();
  readonly #retryAborted = new AbortController();
  #consecutiveFailures = 0;

  constructor(options: CommandConsumerOptions) {
    this.#options = resolveOptions(options);
    this.#log = this.#options.log;
    this.#envelopes = new EnvelopeReader(this.#options.queues, this.#options.maxBodyBytes);
  }

  async start(): Promise<void> {
    this.#connection = await openAmqpConnection({
      url: this.#options.url,
      name: `${this.#options.appId} consumer`,
      log: this.#log,
      maxDelayMs: this.#options.retryMaxDelayMs,
      setup: (model) => this.#setup(model),
      onDisconnect: () => {
        this.#channel = undefined;
        this.#consumerTags = [];
      },
    });
  }

  /** Declares the queues (durable, dead-lettering to the dead-letter exchange) and starts consuming. */
  async #setup(model: ChannelModel): Promise<void> {
    // A confirm channel: a copy republished after an unexpected failure is safe on the broker before the ack.
    const channel = await model.createConfirmChannel();
    // Listen for errors before the first declaration: a broker that closes the channel during set-up
    // (restarting, a declaration it refuses) would otherwise raise an unhandled 'error' and end the process.
    channel.on('error', (error: Error) => this.#log.warn({ err: error }, 'AMQP consumer channel error'));
    await this.#declare(channel);
    channel.on('close', () => {
      if (this.#channel !== channel) return;
      this.#channel = undefined;
      this.#consumerTags = [];
      if (!this.#stopping) model.close().catch(() => {});
    });
    this.#channel = channel;
    const acks = new ChannelAcks(channel);
    this.#acks = acks;
    if (this.#stopping) return;
    const tags: string[] = [];
    for (const { queue, command } of this.#options.queues) {
      const { consumerTag } = await channel.consume(
        queue,
        (message) => {
          if (message === null) {
            // The broker cancelled the consumer (queue deleted): reconnect, which declares it again.
            this.#log.warn({ queue }, 'AMQP consumer cancelled by the broker; reconnecting');
            model.close().catch(() => {});
            return;
          }
          acks.received(message);
          this.#track(this.#handle(channel, acks, queue, command, message));
        },
        { noAck: false },
      );
      tags.push(consumerTag);
    }
    this.#consumerTags = tags;
  }

  /** The prefetch, the dead-letter exchange and queue, and the command queues. */
  async #declare(channel: ConfirmChannel): Promise<void> {
    const { deadLetterExchange, deadLetterQueue, queues, prefetch } = this.#options;
    await channel.prefetch(prefetch);
    await channel.assertExchange(deadLetterExchange, 'topic', { durable: true });
    await channel.assertQueue(deadLetterQueue, { durable: true, arguments: this.#quorum ? { 'x-queue-type': 'quorum' } : {} });
    await channel.bindQueue(deadLetterQueue, deadLetterExchange, '#');
    for (const { queue } of queues) {
      await channel.assertQueue(queue, { durable: true, arguments: commandQueueArguments(this.#options) });
    }
  }

  get #quorum(): boolean {
    return this.#options.queueType === 'quorum';
  }

  #track(work: Promise<void>): void {
    this.#inFlight.add(work);
    void work.finally(() => this.#inFlight.delete(work));
  }

  /**
   * One delivery; while tracing, in a consumer span that continues the sender's trace (W3C `traceparent`
   * in the message's headers) and says how the delivery was settled.
   */
  async #handle(channel: ConfirmChannel, acks: ChannelAcks, queue: string, command: CommandKind, message: ConsumeMessage): Promise<void> {
    const tracer = activeTracer();
    if (tracer === undefined) return this.#settle(channel, acks, queue, command, message, undefined);
    const span = consumeSpan(tracer, queue, command, message);
    try {
      await context.with(trace.setSpan(context.active(), span), () => this.#settle(channel, acks, queue, command, message, span));
    } catch (error) {
      span.setStatus({ code: SpanStatusCode.ERROR, message: errorMessage(error) });
      throw error;
    } finally {
      span.end();
    }
  }

  async #settle(
    channel: ConfirmChannel,
    acks: ChannelAcks,
    queue: string,
    command: CommandKind,
    message: ConsumeMessage,
    span: Span | undefined,
  ): Promise<void> {
    let result: DeliveryResult;
    const started = performance.now();
    const read: { key?: MessageKey } = {};
    try {
      result = await this.#process(queue, command, message, read);
    } catch (error) {
      // Settled first, told after: `onSettled?.(queue, await …)` would skip the retry itself without an onSettled.
      const retried = await this.#retry(channel, acks, queue, command, message, error, read.key);
      if (read.key !== undefined) span?.setAttribute(INBOX_KEY, read.key.messageId);
      span?.setAttribute(INBOX_DECISION, retried);
      this.#options.onSettled?.(queue, retried);
      return;
    }
    if (read.key !== undefined) span?.setAttribute(INBOX_KEY, read.key.messageId);
    span?.setAttribute(INBOX_DECISION, result);
    this.#consecutiveFailures = 0;
    if (result === 'dead-lettered') acks.settle(message, (c) => c.reject(message, false));
    else acks.ack(message);
    // One line per settled delivery, like an HTTP command's (never the payload); retries log their own.
    const propertyId: unknown = message.properties.messageId;
    this.#log.info(
      {
        transport: 'amqp',
        queue,
        consumer: command.consumer,
        messageId: read.key?.messageId ?? propertyId,
        keySource: read.key?.source,
        result,
        durationMs: Math.round((performance.now() - started) * 10) / 10,
      },
      'command',
    );
    this.#options.onSettled?.(queue, result);
  }

  /**
   * A delivery whose command failed, settled after a backoff that grows while failures go on. Transient
   * (the database down or busy, a copy in flight, overload): requeued as it is, not counted. Unexpected:
   * counted on the message; on the maxDeliveries-th it is dead-lettered (reason delivery-limit, the last
   * error as detail), before that a copy with the count raised takes its place on the queue.
   */
  async #retry(
    channel: ConfirmChannel,
    acks: ChannelAcks,
    queue: string,
    command: CommandKind,
    message: ConsumeMessage,
    error: unknown,
    key: MessageKey | undefined,
  ): Promise<DeliveryResult> {
    const log = this.#log;
    this.#consecutiveFailures++;
    const delay = Math.min(this.#options.retryMaxDelayMs, this.#options.retryDelayMs * 2 ** Math.min(this.#consecutiveFailures - 1, 20));
    const messageId: unknown = message.properties.messageId;
    const fields = { queue, messageId, redelivered: message.fields.redelivered, retryInMs: delay };
    const requeue = async () => {
      await abortableDelay(delay, this.#retryAborted.signal);
      // A quorum queue counts a nack toward x-delivery-limit: a copy (the service's own count unchanged) does not.
      if (this.#quorum) await this.#requeueCounted(channel, acks, queue, message, failedAttempts(message, this.#options.attemptsHeader));
      else acks.settle(message, (c) => c.nack(message, false, true));
      return 'requeued' as const;
    };
    if (isTransient(error)) {
      log.warn({ ...fields, reason: errorMessage(error) }, 'command not processed; requeueing after a delay');
      return requeue();
    }
    const attempts = failedAttempts(message, this.#options.attemptsHeader) + 1;
    const { maxDeliveries } = this.#options;
    if (attempts < maxDeliveries) {
      log.error({ ...fields, attempts, maxDeliveries, err: error }, 'command failed; requeueing after a delay');
      await abortableDelay(delay, this.#retryAborted.signal);
      await this.#requeueCounted(channel, acks, queue, message, attempts);
      return 'requeued';
    }
    const detail = `failed on ${attempts} deliveries; the last error: ${errorMessage(error)}`;
    try {
      await this.#deadLetter(command.consumer, message, new PoisonMessage('delivery-limit', detail, bodyOf(message.content), key));
    } catch (failure) {
      // The database is down: the message stays, its count unchanged, until the dead letter can be written.
      log.warn({ ...fields, reason: errorMessage(failure) }, 'delivery limit reached but not recorded; requeueing after a delay');
      return requeue();
    }
    acks.settle(message, (c) => c.reject(message, false));
    return 'dead-lettered';
  }

  /**
   * Puts a copy carrying the count (raised, or as it was for a transient failure on a quorum queue) on
   * the queue and, once the broker confirmed it, acks the
   * original. A crash in between leaves both: a duplicate, which the inbox absorbs. A copy the broker
   * refuses requeues the original instead (its count not raised this time).
   */
  async #requeueCounted(
    channel: ConfirmChannel,
    acks: ChannelAcks,
    queue: string,
    message: ConsumeMessage,
    attempts: number,
  ): Promise<void> {
    // x-delivery-count is the broker's count of the original (quorum queues): the copy starts afresh.
    const headers: Record<string, unknown> = { ...message.properties.headers };
    delete headers['x-delivery-count'];
    const properties = {
      ...message.properties,
      headers: { ...headers, [this.#options.attemptsHeader]: attempts },
      // The broker checks user-id against this connection's user, and cluster-id is deprecated: not copied.
      userId: undefined,
      clusterId: undefined,
    };
    try {
      await new Promise<void>((resolve, reject) => {
        channel.sendToQueue(queue, message.content, properties, (error) => (error ? reject(error as Error) : resolve()));
      });
    } catch {
      acks.settle(message, (c) => c.nack(message, false, true));
      return;
    }
    acks.ack(message);
  }

  /** Runs the command; returns how to settle it. Throws for a failure that may pass on a later delivery (see retry). */
  async #process(queue: string, command: CommandKind, message: ConsumeMessage, read: { key?: MessageKey }): Promise<DeliveryResult> {
    let key: MessageKey | undefined;
    try {
      const envelope = this.#envelopes.read(queue, message.content);
      key = scopeKey(this.#options.producer, messageKeyOf(envelope.messageId, message.properties.messageId, envelope));
      read.key = key;
      const result = await this.#options.runner.execute(command, key, envelope.data);
      return result.kind;
    } catch (error) {
      if (error instanceof PoisonMessage) {
        await this.#deadLetter(command.consumer, message, error);
        return 'dead-lettered';
      }
      if (error instanceof FingerprintMismatchError) {
        // The inbox has recorded the dead letter and logged the mismatch.
        return 'dead-lettered';
      }
      if (error instanceof NeedsReconciliationError) {
        // No redelivery can settle it, only an operator: the message waits in the dead-letter table (and
        // on the dead-letter exchange) to be replayed once the record is settled, rather than being lost.
        const detail =
          `${error.message}: the inbox record stays in progress until an operator settles it (completed, or ` +
          'released and this message replayed)';
        await this.#deadLetter(command.consumer, message, new PoisonMessage('needs-reconciliation', detail, bodyOf(message.content), key));
        return 'dead-lettered';
      }
      throw error;
    }
  }

  /** Records a poison message in the dead-letter table; rejects while the database is down (the caller requeues). */
  #deadLetter(consumer: string, message: ConsumeMessage, poison: PoisonMessage): Promise<void> {
    const { deadLetters, now } = this.#options;
    return recordPoisonMessage(
      { deadLetters, now, log: this.#log, scope: this.#options.producer },
      consumer,
      message.content,
      message.properties.messageId,
      poison,
    );
  }

  /**
   * Graceful stop: cancel the consumers (no new deliveries), let in-flight messages finish and settle
   * (a message waiting to be requeued is requeued at once), then close the channel and the connection.
   */
  async stop(): Promise<void> {
    this.#stopping = true;
    const channel = this.#channel;
    if (channel !== undefined) {
      for (const tag of this.#consumerTags) await channel.cancel(tag).catch(() => {});
    }
    this.#retryAborted.abort();
    while (this.#inFlight.size > 0) await Promise.allSettled([...this.#inFlight]);
    this.#channel = undefined;
    // The settled deliveries' acks go before the channel closes (else the broker would deliver them again).
    this.#acks?.flush();
    if (channel !== undefined) await closeWithin(() => channel.close());
    const connection = this.#connection;
    if (connection !== undefined) await closeWithin(() => connection.close());
    this.#connection = undefined;
  }

  /** Deliveries being processed right now. */
  get inFlightCount(): number {
    return this.#inFlight.size;
  }
}

/**
 * The command queues' arguments: dead-lettering to the dead-letter exchange; on quorum queues also the
 * queue type and the broker's delivery cap (a message delivered that many times unsettled is dead-lettered).
 */
export function commandQueueArguments(options: Pick<CommandConsumerOptions, 'deadLetterExchange' | 'maxDeliveries' | 'queueType'>): {
  [argument: string]: unknown;
} {
  const deadLettering = { 'x-dead-letter-exchange': options.deadLetterExchange ?? AMQP_CONSUMER_DEFAULTS.deadLetterExchange };
  if (options.queueType !== 'quorum') return deadLettering;
  return { ...deadLettering, 'x-queue-type': 'quorum', 'x-delivery-limit': options.maxDeliveries ?? AMQP_CONSUMER_DEFAULTS.maxDeliveries };
}

/** The consumer span of one delivery, a child of the trace context its headers carry. */
function consumeSpan(tracer: Tracer, queue: string, command: CommandKind, message: ConsumeMessage): Span {
  const parent = extractTraceContext(message.properties.headers);
  const messageId: unknown = message.properties.messageId;
  const attributes = {
    [ATTR_MESSAGING_SYSTEM]: MESSAGING_SYSTEM_VALUE_RABBITMQ,
    [ATTR_MESSAGING_DESTINATION_NAME]: queue,
    [ATTR_MESSAGING_RABBITMQ_DESTINATION_ROUTING_KEY]: message.fields.routingKey,
    [ATTR_MESSAGING_OPERATION_TYPE]: MESSAGING_OPERATION_TYPE_VALUE_PROCESS,
    [ATTR_MESSAGING_OPERATION_NAME]: 'consume',
    [INBOX_CONSUMER]: command.consumer,
    ...(typeof messageId === 'string' ? { [ATTR_MESSAGING_MESSAGE_ID]: messageId } : {}),
  };
  return tracer.startSpan(`process ${queue}`, { kind: SpanKind.CONSUMER, attributes }, parent);
}

/** An outage or a busy moment, not the message: requeued, never counted toward the delivery limit. */
function isTransient(error: unknown): boolean {
  return error instanceof InFlightError || error instanceof OverloadedError || isPassingFailure(error);
}

/**
 * Unexpected failures so far of the command in a delivery, kept on the message itself in `header`: such
 * a failure republishes a copy with the count raised (then acks the original), so the count holds across
 * replicas and restarts. Not the broker's x-delivery-count (quorum queues): that also counts the requeues
 * of an outage, which must never dead-letter a valid message.
 */
function failedAttempts(message: ConsumeMessage, header: string): number {
  const value: unknown = message.properties.headers?.[header];
  return typeof value === 'number' && Number.isSafeInteger(value) && value > 0 ? value : 0;
}

function abortableDelay(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}
