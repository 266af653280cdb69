import { ROOT_CONTEXT, SpanKind, SpanStatusCode, type Span, type Tracer } from '@opentelemetry/api';
import {
  ATTR_MESSAGING_DESTINATION_NAME,
  ATTR_MESSAGING_MESSAGE_ID,
  ATTR_MESSAGING_OPERATION_NAME,
  ATTR_MESSAGING_OPERATION_TYPE,
  ATTR_MESSAGING_RABBITMQ_DESTINATION_ROUTING_KEY,
  ATTR_MESSAGING_SYSTEM,
  MESSAGING_OPERATION_TYPE_VALUE_SEND,
  MESSAGING_SYSTEM_VALUE_RABBITMQ,
} from '@opentelemetry/semantic-conventions/incubating';
import type { ChannelModel, ConfirmChannel, RecoveringChannelModel } from 'amqplib';
import { activeTracer, errorMessage, extractTraceContext, traceHeadersOf } from '../inbox/machinery.js';
import { eventEnvelope, type OutboxEvent } from '../outbox/outbox-event.js';
import type { EventPublisher, PublishResult } from '../outbox/relay.js';
import { closeWithin, openAmqpConnection, type AmqpConnectionOptions, type Logger } from '../adapters/amqp/index.js';

export interface AmqpEventPublisherOptions {
  url: string;
  exchange: string;
  log: Logger;
  maxDelayMs: number;
  appId: string;
  /** Test seam: opens the reconnecting connection (default openAmqpConnection, a real broker). */
  connect?: (options: AmqpConnectionOptions) => Promise<RecoveringChannelModel>;
}

/**
 * Publishes outbox events to a durable topic exchange on a confirm channel: routing key = event type,
 * persistent, message-id = event id, body = the CloudEvents JSON. An event counts as published only
 * when the broker confirmed it (its queues have it, on disk for durable queues). The event's trace
 * context (that of the command which caused it) goes in the W3C `traceparent`/`tracestate` headers;
 * while tracing, through a producer span of the publish, a child of that context, ended at the confirm.
 */
export class AmqpEventPublisher implements EventPublisher {
  #connection: RecoveringChannelModel | undefined;
  #channel: ConfirmChannel | undefined;
  #model: ChannelModel | undefined;

  constructor(private readonly options: AmqpEventPublisherOptions) {}

  async start(): Promise<void> {
    const connect = this.options.connect ?? openAmqpConnection;
    this.#connection = await connect({
      url: this.options.url,
      name: `${this.options.appId} publisher`,
      log: this.options.log,
      maxDelayMs: this.options.maxDelayMs,
      setup: (model) => this.#setup(model),
      onDisconnect: () => {
        this.#channel = undefined;
        this.#model = undefined;
      },
    });
  }

  async #setup(model: ChannelModel): Promise<void> {
    const channel = await model.createConfirmChannel();
    // Before the declaration: a channel the broker closes during set-up must not raise an unhandled 'error'.
    channel.on('error', (error: Error) => this.options.log.warn({ err: error }, 'AMQP publisher channel error'));
    await channel.assertExchange(this.options.exchange, 'topic', { durable: true });
    channel.on('close', () => {
      if (this.#channel !== channel) return;
      this.#channel = undefined;
      // A channel closed by the broker while the connection stays up: reconnect to get a fresh one.
      model.close().catch(() => {});
    });
    this.#channel = channel;
    this.#model = model;
  }

  get ready(): boolean {
    return this.#channel !== undefined;
  }

  async publish(events: readonly OutboxEvent[], timeoutMs: number): Promise<PublishResult[]> {
    // The connection this batch goes out on: a timeout closes it, not one that replaced it meanwhile.
    const channel = this.#channel;
    const model = this.#model;
    if (channel === undefined) throw new Error('not connected to the broker');
    const { exchange, appId } = this.options;
    const tracer = activeTracer();
    const confirmations = events.map(
      (event) =>
        new Promise<PublishResult>((resolve) => {
          const body = Buffer.from(JSON.stringify(eventEnvelope(event)), 'utf8');
          const span = tracer === undefined ? undefined : publishSpan(tracer, exchange, event);
          const headers = messageHeaders(event, span);
          const settle = (result: PublishResult) => {
            if (span !== undefined) {
              if (result.error !== undefined) span.setStatus({ code: SpanStatusCode.ERROR, message: result.error });
              span.end();
            }
            resolve(result);
          };
          try {
            channel.publish(
              exchange,
              event.type,
              body,
              {
                persistent: true,
                messageId: event.id,
                type: event.type,
                timestamp: Math.floor(event.occurredAt.getTime() / 1000),
                contentType: 'application/cloudevents+json',
                contentEncoding: 'utf-8',
                appId,
                headers,
              },
              (error: unknown) =>
                settle(error ? { id: event.id, error: errorMessage(error, 'refused by the broker (nack)') } : { id: event.id }),
            );
          } catch (error) {
            settle({ id: event.id, error: errorMessage(error, 'publish failed') });
          }
        }),
    );
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<'timeout'>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), timeoutMs);
    });
    const settled = new Map<string, PublishResult>();
    for (const [i, p] of confirmations.entries()) void p.then((r) => settled.set(events[i]!.id, r));
    const outcome = await Promise.race([Promise.all(confirmations), timedOut]);
    clearTimeout(timer);
    if (outcome !== 'timeout') return outcome;
    // No confirm in time: the channel is suspect. Reconnect; the unconfirmed events go again later.
    model?.close().catch(() => {});
    return events.map((e) => settled.get(e.id) ?? { id: e.id, error: `no publisher confirm within ${timeoutMs} ms` });
  }

  async close(): Promise<void> {
    const connection = this.#connection;
    this.#connection = undefined;
    this.#channel = undefined;
    if (connection !== undefined) await closeWithin(() => connection.close());
  }
}

/** A producer span for one event's publish, a child of the trace context the event was stored with. */
function publishSpan(tracer: Tracer, exchange: string, event: OutboxEvent): Span {
  const parent =
    event.traceParent == null
      ? ROOT_CONTEXT
      : extractTraceContext({ traceparent: event.traceParent, ...(event.traceState == null ? {} : { tracestate: event.traceState }) });
  const attributes = {
    [ATTR_MESSAGING_SYSTEM]: MESSAGING_SYSTEM_VALUE_RABBITMQ,
    [ATTR_MESSAGING_DESTINATION_NAME]: exchange,
    [ATTR_MESSAGING_RABBITMQ_DESTINATION_ROUTING_KEY]: event.type,
    [ATTR_MESSAGING_OPERATION_TYPE]: MESSAGING_OPERATION_TYPE_VALUE_SEND,
    [ATTR_MESSAGING_OPERATION_NAME]: 'publish',
    [ATTR_MESSAGING_MESSAGE_ID]: event.id,
  };
  return tracer.startSpan(`publish ${exchange}`, { kind: SpanKind.PRODUCER, attributes }, parent);
}

/**
 * The message's headers: the causing message id, and the trace context: the publish span's while
 * tracing, otherwise the one the event was stored with, passed on as it is.
 */
function messageHeaders(event: OutboxEvent, span: Span | undefined): Record<string, string> {
  const headers: Record<string, string> = { 'causation-id': event.causationId };
  const context = span === undefined ? undefined : traceHeadersOf(span.spanContext());
  const traceparent = context?.traceparent ?? event.traceParent;
  const tracestate = context === undefined ? event.traceState : context.tracestate;
  if (traceparent != null) headers.traceparent = traceparent;
  if (traceparent != null && tracestate != null) headers.tracestate = tracestate;
  return headers;
}
