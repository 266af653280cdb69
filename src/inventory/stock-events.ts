import { v5 as uuidv5 } from 'uuid';
import type { TraceHeaders } from '../inbox/tracing.js';
import type { OutboxEventInput } from '../outbox/outbox-event.js';
import type { ReleaseOutcome, ReserveOutcome } from './stock.schemas.js';

/** The events a stock change publishes (routing key = type), with the data each carries. */
export const STOCK_RESERVED = 'inventory.stock-reserved';
export const STOCK_RELEASED = 'inventory.stock-released';
export const RESERVATION_REFUSED = 'inventory.reservation-refused';

/** CloudEvents `source` of every event this service publishes. */
export const EVENT_SOURCE = 'urn:bookstore:inventory';

/** Name-based (v5) event ids live in this namespace. */
const EVENT_ID_NAMESPACE = '6f1c2b7e-4a59-4c1e-9d0e-3b8f5a2c7d41';

/**
 * The event id for what one message did to one book: a name-based UUID of (consumer, message id, book),
 * so the same command always yields the same id and a redelivery cannot mint a second event.
 */
export function stockEventId(consumer: string, messageId: string, bookId: string): string {
  return uuidv5(`${consumer}\n${messageId}\n${bookId}`, EVENT_ID_NAMESPACE);
}

/**
 * The events a command's outcome publishes: reserved, released (one per book) or refused (not enough
 * stock, an unknown book, or an order cancelled before it was placed).
 * `already-reserved` and `not-reserved` change nothing and publish nothing: the reservation or release
 * that did change the stock published its own event. Each event keeps the command's trace context
 * (`trace`, while tracing), which the relay publishes with it.
 */
export function stockEventsFor(
  consumer: string,
  messageId: string,
  outcome: ReserveOutcome | ReleaseOutcome,
  now: Date,
  trace?: TraceHeaders,
): OutboxEventInput[] {
  const event = (type: string, bookId: string, data: Record<string, unknown>): OutboxEventInput => ({
    id: stockEventId(consumer, messageId, bookId),
    type,
    source: EVENT_SOURCE,
    orderingKey: bookId,
    consumer,
    causationId: messageId,
    data,
    occurredAt: now,
    ...(trace === undefined ? {} : { traceParent: trace.traceparent, traceState: trace.tracestate ?? null }),
  });
  switch (outcome.result) {
    case 'reserved':
      return [event(STOCK_RESERVED, outcome.bookId, { orderId: outcome.orderId, bookId: outcome.bookId, quantity: outcome.quantity })];
    case 'insufficient-stock':
      return [
        event(RESERVATION_REFUSED, outcome.bookId, {
          orderId: outcome.orderId,
          bookId: outcome.bookId,
          quantity: outcome.quantity,
          reason: 'insufficient-stock',
          available: outcome.available,
        }),
      ];
    case 'unknown-book':
    case 'order-cancelled':
      return [
        event(RESERVATION_REFUSED, outcome.bookId, {
          orderId: outcome.orderId,
          bookId: outcome.bookId,
          quantity: outcome.quantity,
          reason: outcome.result,
        }),
      ];
    case 'released':
      return outcome.released.map((r) =>
        event(STOCK_RELEASED, r.bookId, { orderId: outcome.orderId, bookId: r.bookId, quantity: r.quantity }),
      );
    case 'already-reserved':
    case 'not-reserved':
      return [];
  }
}
