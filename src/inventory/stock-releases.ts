import { sql } from 'kysely';
import type { Tx } from '../schema/database.js';
import { insertManySkippingPresent, parameterChunks, selectForUpdate } from '../db/dialect.js';
import { lockOrders } from './order-locks.js';
import type { ReleaseOutcome } from './stock.schemas.js';

/** Cancellations: an order's live reservations given back, every cancellation recorded. */

export interface ReleaseCommand {
  orderId: string;
  /** Release only this book; all of the order's books when absent. */
  bookId?: string | undefined;
  messageId: string;
}

/** Releases an order's live reservations (one book, or all of the order's books): releaseStockBatch of one. */
export async function releaseStock(trx: Tx, command: ReleaseCommand, now: Date): Promise<ReleaseOutcome> {
  const [outcome] = await releaseStockBatch(trx, [command], now);
  return outcome!;
}

/**
 * Releases the live reservations of several cancellations in one transaction, deciding as releaseStock
 * would for each in the order given. Locks as reservations do: the orders first (lockOrders), then the
 * stock rows of every book concerned (in book order), then the reservation rows, so no two transactions
 * wait on each other in a cycle.
 * Each release is a conditional update of the reservation row, so a reservation is given back once.
 * Every cancellation is recorded, whether or not it found anything to release: one that arrives before
 * its order (redelivery and requeueing reorder messages) must still refuse that order's later placement.
 */
export async function releaseStockBatch(trx: Tx, commands: readonly ReleaseCommand[], now: Date): Promise<ReleaseOutcome[]> {
  if (commands.length === 0) return [];
  await lockOrders(
    trx,
    commands.map((c) => c.orderId),
  );
  const live = await lockLiveReservations(trx, commands);
  const outcomes: ReleaseOutcome[] = [];
  for (const command of commands) {
    const released: { bookId: string; quantity: number }[] = [];
    for (const reservation of live.filter((r) => r.orderId === command.orderId && covers(command, r.bookId))) {
      live.splice(live.indexOf(reservation), 1);
      if (await releaseReservation(trx, reservation, command.messageId, now)) {
        released.push({ bookId: reservation.bookId, quantity: reservation.quantity });
      }
    }
    outcomes.push(
      released.length === 0
        ? { result: 'not-reserved', orderId: command.orderId }
        : { result: 'released', orderId: command.orderId, released },
    );
  }
  await insertManySkippingPresent(
    trx,
    'order_cancellations',
    commands.map((c) => ({ order_id: c.orderId, book_id: c.bookId ?? null, cancelled_by: c.messageId, cancelled_at: now })),
    ['order_id', 'cancelled_by'],
  );
  return outcomes;
}

interface LiveReservation {
  orderId: string;
  bookId: string;
  quantity: number;
}

function covers(command: ReleaseCommand, bookId: string): boolean {
  return command.bookId === undefined || command.bookId === bookId;
}

/**
 * The live reservations the cancellations cover, in book order, read after their books' stock rows are
 * locked (in book order). Which books a whole-order cancellation covers is known only by reading, so the
 * read is repeated after the lock; a book reserved in between is locked too, and read again.
 */
async function lockLiveReservations(trx: Tx, commands: readonly ReleaseCommand[]): Promise<LiveReservation[]> {
  const orders = [...new Set(commands.map((c) => c.orderId))];
  const locked = new Set<string>();
  let wanted = new Set(commands.flatMap((c) => (c.bookId === undefined ? [] : [c.bookId])));
  let live = commands.some((c) => c.bookId === undefined) ? await liveReservations(trx, orders, commands) : undefined;
  for (;;) {
    for (const reservation of live ?? []) wanted.add(reservation.bookId);
    const missing = [...wanted].filter((b) => !locked.has(b)).sort();
    if (live !== undefined && missing.length === 0) return live;
    await selectForUpdate(trx, 'stock_items', 'book_id', missing);
    for (const bookId of missing) locked.add(bookId);
    live = await liveReservations(trx, orders, commands);
    wanted = new Set(locked);
  }
}

async function liveReservations(trx: Tx, orders: readonly string[], commands: readonly ReleaseCommand[]): Promise<LiveReservation[]> {
  const rows = [];
  for (const chunk of parameterChunks(trx, orders, 1)) {
    rows.push(
      ...(await trx
        .selectFrom('stock_reservations')
        .select(['order_id', 'book_id', 'quantity'])
        .where('order_id', 'in', chunk)
        .where('released_at', 'is', null)
        .orderBy('book_id')
        .execute()),
    );
  }
  return (
    rows
      .map((row) => ({ orderId: row.order_id, bookId: row.book_id, quantity: row.quantity }))
      .filter((r) => commands.some((c) => c.orderId === r.orderId && covers(c, r.bookId)))
      // In book order across the chunks too: releases follow it.
      .sort((a, b) => (a.bookId < b.bookId ? -1 : a.bookId > b.bookId ? 1 : 0))
  );
}

/** Marks one reservation released and gives its stock back; false when it was no longer live. */
async function releaseReservation(trx: Tx, reservation: LiveReservation, messageId: string, now: Date): Promise<boolean> {
  const marked = await trx
    .updateTable('stock_reservations')
    .set({ released_at: now, released_by: messageId })
    .where('order_id', '=', reservation.orderId)
    .where('book_id', '=', reservation.bookId)
    .where('released_at', 'is', null)
    .executeTakeFirst();
  if (Number(marked.numUpdatedRows) !== 1) return false;
  await trx
    .updateTable('stock_items')
    .set({ reserved: sql`reserved - ${reservation.quantity}`, updated_at: now })
    .where('book_id', '=', reservation.bookId)
    .execute();
  return true;
}
