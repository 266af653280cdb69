import { sql, type Insertable, type Kysely } from 'kysely';
import type { Database, ReservationRow, StockItemRow, Tx } from '../db/database.js';
import { firstRows, insertIfAbsent, insertIfAbsentThenUpdate, insertRows, parameterChunks, selectForUpdate } from '../db/dialect.js';
import { normalizeUuid } from '../inbox/command-schemas.js';
import type { ReleaseOutcome, ReserveOutcome } from './stock.schemas.js';

/** A book's stock as the domain sees it. */
export interface StockItem {
  bookId: string;
  title: string;
  onHand: number;
  reserved: number;
  available: number;
  updatedAt: Date;
}

export function toStockItem(row: StockItemRow): StockItem {
  return {
    bookId: normalizeUuid(row.book_id),
    title: row.title,
    onHand: row.on_hand,
    reserved: row.reserved,
    available: row.on_hand - row.reserved,
    updatedAt: row.updated_at,
  };
}

/** Reads one book's stock, or undefined. */
export async function findStockItem(db: Kysely<Database>, bookId: string): Promise<StockItem | undefined> {
  const row = await db.selectFrom('stock_items').selectAll().where('book_id', '=', bookId).executeTakeFirst();
  return row === undefined ? undefined : toStockItem(row);
}

/** Lists stock ordered by book id, keyset-paged. */
export async function listStockItems(
  db: Kysely<Database>,
  page: { after?: string | undefined; limit: number },
): Promise<{ items: StockItem[]; nextAfter: string | null }> {
  let query = db.selectFrom('stock_items').selectAll().orderBy('book_id');
  if (page.after !== undefined) query = query.where('book_id', '>', page.after);
  const rows = await firstRows(db, query, page.limit + 1).execute();
  const items = rows.slice(0, page.limit).map(toStockItem);
  return { items, nextAfter: rows.length > page.limit ? (items.at(-1)?.bookId ?? null) : null };
}

export type SetStockResult =
  { kind: 'created'; item: StockItem } | { kind: 'updated'; item: StockItem } | { kind: 'below-reserved'; reserved: number };

/**
 * Sets a book's title and on-hand count to absolute values (naturally idempotent, so no inbox).
 * Refuses an on-hand count below what is already reserved.
 */
export async function setStock(
  db: Kysely<Database>,
  input: { bookId: string; title: string; onHand: number },
  now: Date,
): Promise<SetStockResult> {
  return db.transaction().execute(async (trx) => {
    for (let attempt = 0; attempt < 2; attempt++) {
      const updated = await trx
        .updateTable('stock_items')
        .set({ title: input.title, on_hand: input.onHand, updated_at: now })
        .where('book_id', '=', input.bookId)
        .where('reserved', '<=', input.onHand)
        .executeTakeFirst();
      if (Number(updated.numUpdatedRows) === 1) {
        return { kind: 'updated' as const, item: await stockItemOrThrow(trx, input.bookId) };
      }
      const existing = await trx.selectFrom('stock_items').select('reserved').where('book_id', '=', input.bookId).executeTakeFirst();
      if (existing !== undefined) return { kind: 'below-reserved' as const, reserved: existing.reserved };
      const created = await insertIfAbsent(
        trx,
        'stock_items',
        { book_id: input.bookId, title: input.title, on_hand: input.onHand, reserved: 0, updated_at: now },
        ['book_id'],
      );
      if (created) return { kind: 'created' as const, item: await stockItemOrThrow(trx, input.bookId) };
      // Another request created the book between our update and insert: update it on the next pass.
    }
    throw new Error(`stock item ${input.bookId} changed concurrently twice`);
  });
}

async function stockItemOrThrow(trx: Tx, bookId: string): Promise<StockItem> {
  const item = await findStockItem(trx, bookId);
  if (item === undefined) throw new Error(`stock item ${bookId} vanished inside its transaction`);
  return item;
}

export interface ReserveCommand {
  orderId: string;
  bookId: string;
  quantity: number;
  messageId: string;
}

/**
 * Reserves stock for one order line, inside the claim's transaction.
 * The reservation row (unique per order and book) is written first, so a second message for the
 * same order waits on it and then sees it; the stock update checks availability in the same statement.
 */
export async function reserveStock(trx: Tx, command: ReserveCommand, now: Date): Promise<ReserveOutcome> {
  const { orderId, bookId, quantity } = command;
  // The reservation row and, only when it is new, the stock it takes: one statement where the dialect allows.
  const { inserted, updated } = await insertIfAbsentThenUpdate(
    trx,
    'stock_reservations',
    {
      order_id: orderId,
      book_id: bookId,
      quantity,
      reserved_by: command.messageId,
      reserved_at: now,
      released_by: null,
      released_at: null,
    },
    ['order_id', 'book_id'],
    reserveIfAvailableQuery(trx, bookId, quantity, now),
  );
  if (!inserted) {
    const existing = await findReservation(trx, orderId, bookId);
    if (existing === undefined) throw new Error(`reservation ${orderId}/${bookId} conflicted but cannot be read`);
    return {
      result: 'already-reserved',
      orderId,
      bookId,
      quantity,
      existing: { quantity: existing.quantity, reservedBy: existing.reserved_by, released: existing.released_at !== null },
    };
  }

  if (updated === 1) return { result: 'reserved', orderId, bookId, quantity };

  // Refused by that statement, but another transaction may have freed stock since, and a refusal that
  // records "3 wanted, 4 available" contradicts itself. Lock the row (an update that changes nothing
  // takes the same row lock on every dialect) so the figure read next cannot move, and decide on it.
  const locked = await trx
    .updateTable('stock_items')
    .set({ reserved: sql`reserved` })
    .where('book_id', '=', bookId)
    .executeTakeFirst();
  const stock = Number(locked.numUpdatedRows) === 1 ? await findStockItem(trx, bookId) : undefined;
  if (stock !== undefined && stock.available >= quantity && (await reserveIfAvailable(trx, bookId, quantity, now))) {
    return { result: 'reserved', orderId, bookId, quantity };
  }

  // Refused: take back the reservation row written above, and say why.
  await trx.deleteFrom('stock_reservations').where('order_id', '=', orderId).where('book_id', '=', bookId).execute();
  if (stock === undefined) return { result: 'unknown-book', orderId, bookId, quantity };
  return { result: 'insufficient-stock', orderId, bookId, quantity, available: stock.available };
}

/**
 * Reserves stock for several order lines in one transaction, with the same decisions reserveStock
 * would take for each line in the order given: the books' stock rows are locked (in book order, so
 * batches cannot deadlock on each other), the decisions are taken in memory against the locked figures,
 * then applied set-based: one multi-row insert of the new reservations, one update of the stock rows.
 * A reservation that another transaction inserts meanwhile makes the insert fail, and with it the
 * batch (the caller then runs each line on its own).
 */
export async function reserveStockBatch(trx: Tx, commands: readonly ReserveCommand[], now: Date): Promise<ReserveOutcome[]> {
  if (commands.length === 1) return [await reserveStock(trx, commands[0]!, now)];
  const books = [...new Set(commands.map((c) => c.bookId))].sort();
  const orders = [...new Set(commands.map((c) => c.orderId))];
  const locked = await selectForUpdate(trx, 'stock_items', 'book_id', books);
  const available = new Map(locked.map((row) => [normalizeUuid(row.book_id), row.on_hand - row.reserved]));
  const existing = await findReservations(trx, commands, orders, books);
  const reservations = new Map<string, { quantity: number; reservedBy: string; released: boolean }>();
  for (const row of existing) {
    reservations.set(lineKey(normalizeUuid(row.order_id), normalizeUuid(row.book_id)), {
      quantity: row.quantity,
      reservedBy: row.reserved_by,
      released: row.released_at !== null,
    });
  }

  const outcomes: ReserveOutcome[] = [];
  const added = new Map<string, number>();
  const inserts: Insertable<Database['stock_reservations']>[] = [];
  for (const { orderId, bookId, quantity, messageId } of commands) {
    const line = lineKey(orderId, bookId);
    const prior = reservations.get(line);
    const free = available.get(bookId);
    if (prior !== undefined) {
      outcomes.push({ result: 'already-reserved', orderId, bookId, quantity, existing: { ...prior } });
    } else if (free === undefined) {
      outcomes.push({ result: 'unknown-book', orderId, bookId, quantity });
    } else if (free < quantity) {
      outcomes.push({ result: 'insufficient-stock', orderId, bookId, quantity, available: free });
    } else {
      available.set(bookId, free - quantity);
      added.set(bookId, (added.get(bookId) ?? 0) + quantity);
      reservations.set(line, { quantity, reservedBy: messageId, released: false });
      inserts.push({
        order_id: orderId,
        book_id: bookId,
        quantity,
        reserved_by: messageId,
        reserved_at: now,
        released_by: null,
        released_at: null,
      });
      outcomes.push({ result: 'reserved', orderId, bookId, quantity });
    }
  }

  if (inserts.length > 0) {
    await insertRows(trx, 'stock_reservations', inserts);
    const increments = [...added];
    const updated = await addReserved(trx, increments, now);
    if (updated !== increments.length) {
      throw new Error(`reserving stock updated ${updated} of ${increments.length} locked books`);
    }
  }
  return outcomes;
}

/**
 * The reservations recorded for the lines' orders and books (`orders` and `books` as the batch lists
 * them), read in as many statements as the parameter limit needs, each for a run of the lines.
 */
async function findReservations(trx: Tx, lines: readonly ReserveCommand[], orders: readonly string[], books: readonly string[]) {
  const found = [];
  for (const chunk of parameterChunks(trx, lines, 2)) {
    const chunkOrders = new Set(chunk.map((c) => c.orderId));
    const chunkBooks = new Set(chunk.map((c) => c.bookId));
    found.push(
      ...(await trx
        .selectFrom('stock_reservations')
        .select(['order_id', 'book_id', 'quantity', 'reserved_by', 'released_at'])
        .where(
          'order_id',
          'in',
          orders.filter((o) => chunkOrders.has(o)),
        )
        .where(
          'book_id',
          'in',
          books.filter((b) => chunkBooks.has(b)),
        )
        .execute()),
    );
  }
  return found;
}

/** Adds each book's reserved quantity, chosen by book id in one CASE per statement; returns the rows changed. */
async function addReserved(trx: Tx, increments: readonly (readonly [string, number])[], now: Date): Promise<number> {
  let updated = 0;
  // Each book binds its id twice (CASE and IN) and its quantity; each statement its time.
  for (const chunk of parameterChunks(trx, increments, 3, 1)) {
    const result = await trx
      .updateTable('stock_items')
      .set({
        reserved: sql`reserved + case ${sql.ref('book_id')} ${sql.join(
          chunk.map(([bookId, n]) => sql`when ${bookId} then cast(${n} as integer)`),
          sql` `,
        )} end`,
        updated_at: now,
      })
      .where(
        'book_id',
        'in',
        chunk.map(([bookId]) => bookId),
      )
      .executeTakeFirst();
    updated += Number(result.numUpdatedRows);
  }
  return updated;
}

function lineKey(orderId: string, bookId: string): string {
  return `${orderId}/${bookId}`;
}

/** Adds to the book's reserved count when enough is available, checked in the same statement. */
async function reserveIfAvailable(trx: Tx, bookId: string, quantity: number, now: Date): Promise<boolean> {
  const updated = await reserveIfAvailableQuery(trx, bookId, quantity, now).executeTakeFirst();
  return Number(updated.numUpdatedRows) === 1;
}

function reserveIfAvailableQuery(trx: Tx, bookId: string, quantity: number, now: Date) {
  return trx
    .updateTable('stock_items')
    .set({ reserved: sql`reserved + ${quantity}`, updated_at: now })
    .where('book_id', '=', bookId)
    .where(sql<boolean>`on_hand - reserved >= ${quantity}`);
}

async function findReservation(trx: Tx, orderId: string, bookId: string): Promise<ReservationRow | undefined> {
  return trx.selectFrom('stock_reservations').selectAll().where('order_id', '=', orderId).where('book_id', '=', bookId).executeTakeFirst();
}

/**
 * Releases an order's live reservations (one book, or all of the order's books), inside the claim's
 * transaction. Each release is a conditional update of the reservation row, so two cancellations of
 * the same order under different message ids cannot both give the stock back.
 */
export async function releaseStock(
  trx: Tx,
  command: { orderId: string; bookId?: string | undefined; messageId: string },
  now: Date,
): Promise<ReleaseOutcome> {
  let query = trx
    .selectFrom('stock_reservations')
    .select(['book_id', 'quantity'])
    .where('order_id', '=', command.orderId)
    .where('released_at', 'is', null);
  if (command.bookId !== undefined) query = query.where('book_id', '=', command.bookId);
  const live = await query.orderBy('book_id').execute();

  const released: { bookId: string; quantity: number }[] = [];
  for (const reservation of live) {
    const marked = await trx
      .updateTable('stock_reservations')
      .set({ released_at: now, released_by: command.messageId })
      .where('order_id', '=', command.orderId)
      .where('book_id', '=', reservation.book_id)
      .where('released_at', 'is', null)
      .executeTakeFirst();
    if (Number(marked.numUpdatedRows) !== 1) continue;
    await trx
      .updateTable('stock_items')
      .set({ reserved: sql`reserved - ${reservation.quantity}`, updated_at: now })
      .where('book_id', '=', reservation.book_id)
      .execute();
    released.push({ bookId: normalizeUuid(reservation.book_id), quantity: reservation.quantity });
  }
  return released.length === 0
    ? { result: 'not-reserved', orderId: command.orderId }
    : { result: 'released', orderId: command.orderId, released };
}
