/** An event to publish, as the work that caused it describes it; written to the outbox in that work's transaction. */
export interface OutboxEventInput {
  /** The event id consumers deduplicate by (the AMQP message-id). */
  readonly id: string;
  /** Also the routing key. */
  readonly type: string;
  readonly source: string;
  /** Events with the same key are published in the order they were written (the book id). */
  readonly orderingKey: string;
  /** The consumer whose command caused the event. */
  readonly consumer: string;
  /** The message id of that command. */
  readonly causationId: string;
  readonly data: Record<string, unknown>;
  readonly occurredAt: Date;
  /** The W3C trace context of the command that caused the event, published with it (null: none). */
  readonly traceParent?: string | null;
  readonly traceState?: string | null;
}

/** An outbox row as the relay and the admin routes see it. */
export interface OutboxEvent extends OutboxEventInput {
  readonly seq: string;
  readonly publishedAt: Date | null;
  readonly attempts: number;
  readonly lastError: string | null;
  readonly lastAttemptAt: Date | null;
}

/**
 * An event as the admin routes answer with it: the event, its times as RFC 3339 strings (null stays null).
 * Each route's response schema says which of its fields that route shows; the serializer writes no other.
 */
export function eventToJson(event: OutboxEvent) {
  return {
    ...event,
    occurredAt: event.occurredAt.toISOString(),
    publishedAt: event.publishedAt?.toISOString() ?? null,
    lastAttemptAt: event.lastAttemptAt?.toISOString() ?? null,
  };
}

/**
 * The message body published for an event: a CloudEvents 1.0 structured-mode event
 * (`application/cloudevents+json`), with the causing message id as the `causationid` extension.
 */
export function eventEnvelope(event: OutboxEventInput) {
  return {
    specversion: '1.0',
    id: event.id,
    source: event.source,
    type: event.type,
    subject: event.orderingKey,
    time: event.occurredAt.toISOString(),
    datacontenttype: 'application/json',
    causationid: event.causationId,
    data: event.data,
  };
}
