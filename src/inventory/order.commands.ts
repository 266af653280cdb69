import { commandKind, RELEASE_STOCK, RESERVE_STOCK } from '../command-kinds.js';
import type { Database } from '../schema/database.js';
import { normalizeUuid, type TransactionalKind } from '../inbox/machinery.js';
import { insertOutboxEvents } from '../outbox/outbox.repository.js';
import { stockEventsFor } from './stock-events.js';
import { releaseStock, releaseStockBatch, reserveStock, reserveStockBatch } from './stock.repository.js';
import { OrderCancelledData, OrderPlacedData, ReleaseOutcome, ReserveOutcome } from './stock.schemas.js';

/** The inventory's commands, shared by the HTTP routes and the AMQP consumers. */

// The consumers are named in the one list of command kinds.
export { RELEASE_STOCK, RESERVE_STOCK };

/** OrderPlaced: reserve stock, and write the stock events in the same transaction. */
export const orderPlacedCommand: TransactionalKind<typeof OrderPlacedData, typeof ReserveOutcome, Database> = {
  kind: 'transaction',
  consumer: RESERVE_STOCK,
  name: commandKind(RESERVE_STOCK).name,
  data: OrderPlacedData,
  outcome: ReserveOutcome,
  normalize: (d) => ({ orderId: normalizeUuid(d.orderId), bookId: normalizeUuid(d.bookId), quantity: d.quantity }),
  // The reservation's writes and the events go with the inbox's completion (deferred writes).
  run: async (trx, { data, key, trace }, now, writes) => {
    const outcome = await reserveStock(trx, { ...data, messageId: key.messageId }, now, writes);
    await insertOutboxEvents(trx, stockEventsFor(RESERVE_STOCK, key.messageId, outcome, now, trace), writes);
    return outcome;
  },
  // The set-based reservation, then every claimed message's events in one multi-row insert.
  runBatch: async (trx, items, now, writes) => {
    const outcomes = await reserveStockBatch(
      trx,
      items.map(({ data, key }) => ({ ...data, messageId: key.messageId })),
      now,
      writes,
    );
    await insertOutboxEvents(
      trx,
      items.flatMap(({ key, trace }, i) => stockEventsFor(RESERVE_STOCK, key.messageId, outcomes[i]!, now, trace)),
      writes,
    );
    return outcomes;
  },
};

/** OrderCancelled: release the order's reservations, and write the stock events in the same transaction. */
export const orderCancelledCommand: TransactionalKind<typeof OrderCancelledData, typeof ReleaseOutcome, Database> = {
  kind: 'transaction',
  consumer: RELEASE_STOCK,
  name: commandKind(RELEASE_STOCK).name,
  data: OrderCancelledData,
  outcome: ReleaseOutcome,
  normalize: (d) =>
    d.bookId === undefined ? { orderId: normalizeUuid(d.orderId) } : { orderId: normalizeUuid(d.orderId), bookId: normalizeUuid(d.bookId) },
  run: async (trx, { data, key, trace }, now, writes) => {
    const outcome = await releaseStock(trx, { ...data, messageId: key.messageId }, now);
    await insertOutboxEvents(trx, stockEventsFor(RELEASE_STOCK, key.messageId, outcome, now, trace), writes);
    return outcome;
  },
  // Every cancellation's books locked up front in book order (not item by item), then the events in one insert.
  runBatch: async (trx, items, now, writes) => {
    const outcomes = await releaseStockBatch(
      trx,
      items.map(({ data, key }) => ({ ...data, messageId: key.messageId })),
      now,
    );
    await insertOutboxEvents(
      trx,
      items.flatMap(({ key, trace }, i) => stockEventsFor(RELEASE_STOCK, key.messageId, outcomes[i]!, now, trace)),
      writes,
    );
    return outcomes;
  },
};
