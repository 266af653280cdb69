/** The AMQP mode's checks after the run: each order reserved once, each reservation's event out, nothing left behind. */
import { stockEventId, STOCK_RESERVED } from '../../../src/inventory/stock-events.js';
import { RESERVE_STOCK } from '../../../src/inventory/order.commands.js';
import { say, violation } from '../log.js';
import { liveReservedByBook, type ReservationRow, type Rows } from '../database.js';
import { amqpStats } from '../report.js';
import type { ReceivedEvent } from './broker.js';
import type { Order } from './producer.js';

export async function checkInvariants(db: Rows, orders: readonly Order[], received: ReadonlyMap<string, ReceivedEvent>): Promise<void> {
  const rows = await db.reservations();
  const byOrder = new Map<string, ReservationRow[]>();
  for (const row of rows) byOrder.set(row.order_id, [...(byOrder.get(row.order_id) ?? []), row]);
  for (const order of orders) {
    const found = byOrder.get(order.orderId) ?? [];
    const row = found[0];
    if (found.length !== 1 || row === undefined) {
      violation('reserved-exactly-once', `order ${order.orderId} has ${found.length} reservations`);
    } else if (row.quantity !== order.quantity || row.book_id !== order.bookId) {
      violation('reservation', `order ${order.orderId} reserved ${row.quantity} of ${row.book_id}`);
    } else if (!order.messageIds.includes(row.reserved_by)) {
      violation('reservation', `order ${order.orderId} reserved by unknown message ${row.reserved_by}`);
    }
  }
  if (rows.length !== orders.length) violation('reservations', `${rows.length} reservations for ${orders.length} orders`);

  const live = liveReservedByBook(rows);
  for (const s of await db.stock()) {
    const sum = live.get(s.book_id) ?? 0;
    if (s.reserved !== sum) violation('stock', `book ${s.book_id}: reserved ${s.reserved}, reservations sum to ${sum}`);
  }

  const reservedEvents = [...received.entries()].filter(([, e]) => e.type === STOCK_RESERVED);
  for (const row of rows) {
    const id = stockEventId(RESERVE_STOCK, row.reserved_by, row.book_id);
    const event = received.get(id);
    if (event === undefined) {
      violation('event-published', `no stock-reserved event ${id} for order ${row.order_id}`);
    } else if (event.bodyId !== id || event.causation !== row.reserved_by) {
      violation('event-body', `event ${id}: body id ${event.bodyId}, causation ${event.causation}`);
    }
  }
  if (reservedEvents.length !== rows.length) {
    violation('distinct-events', `${reservedEvents.length} distinct stock-reserved event ids for ${rows.length} reservations`);
  }
  const others = [...received.values()].filter((e) => e.type !== STOCK_RESERVED);
  if (others.length > 0) {
    const types = [...new Set(others.map((e) => e.type))].join(', ');
    violation('unexpected-events', `${others.length} events of other types (${types})`);
  }

  const pending = await db.count('outbox where published_at is null');
  if (pending !== 0) violation('outbox', `${pending} events still pending`);
  const letters = await db.count('dead_letters');
  if (letters !== 0) violation('dead-letters', `${letters} dead letters`);
  const outboxRows = await db.count('outbox');
  say(
    `checked: ${rows.length} reservations, ${reservedEvents.length} distinct events received ` +
      `(${amqpStats.eventRedeliveries} repeats), ${outboxRows} outbox rows`,
  );
}
