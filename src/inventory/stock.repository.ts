import type { Insertable, Kysely } from 'kysely';
import type { Database, StockItemRow, Tx } from '../schema/database.js';
import {
  DeferredWrites,
  firstRows,
  insertIfAbsent,
  insertRows,
  parameterChunks,
  selectForUpdateAfterKeyLocks,
  unionByKeys,
  updateByKey,
  type KeyedUnion,
  type KeyedUpdate,
} from '../db/dialect.js';
import { sameKeySpace } from '../inbox/machinery.js';
import { lineKey, orderLocks } from './order-locks.js';
import type { ReserveOutcome } from './stock.schemas.js';

export { releaseStock, releaseStockBatch, type ReleaseCommand } from './stock-releases.js';

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
    bookId: row.book_id,
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
 * Reserves stock for one order line, inside the claim's transaction: reserveStockBatch of one line, so a
 * single message and a batch take their locks the same way (orders, then stock rows, then reservations).
 */
export async function reserveStock(trx: Tx, command: ReserveCommand, now: Date, writes?: DeferredWrites): Promise<ReserveOutcome> {
  const [outcome] = await reserveStockBatch(trx, [command], now, writes);
  return outcome!;
}

/**
 * Reserves stock for several order lines in one transaction, with the same decisions reserveStock
 * would take for each line in the order given: the orders are locked (lockOrders), then the books'
 * stock rows (in book order, so batches cannot deadlock on each other), the decisions are taken in
 * memory against the locked figures, then applied set-based: one multi-row insert of the new
 * reservations, one update of the stock rows.
 * Every path that writes a reservation holds its book's stock row first, so the reservations read
 * after the lock cannot change before the insert.
 */
export async function reserveStockBatch(
  trx: Tx,
  commands: readonly ReserveCommand[],
  now: Date,
  given?: DeferredWrites,
): Promise<ReserveOutcome[]> {
  const books = [...new Set(commands.map((c) => c.bookId))].sort();
  const orders = [...new Set(commands.map((c) => c.orderId))];
  // The orders' locks (lockOrders), then the books' stock rows: one statement where the dialect allows.
  const locked = await selectForUpdateAfterKeyLocks(trx, orderLocks(orders), 'stock_items', 'book_id', books);
  const lines = await readLines(trx, commands, orders, books);
  const state: ReservationState = {
    available: new Map(locked.map((row) => [row.book_id, row.on_hand - row.reserved])),
    reservations: new Map(lines.reservations.map((row) => [lineKey(row.order_id, row.book_id), recordedReservation(row)])),
    cancelled: firstCancellations(lines.cancellations),
  };
  const outcomes = commands.map((command) => decideReservation(state, command));
  await applyReservations(trx, commands, outcomes, now, given);
  return outcomes;
}

/** What a batch decides each line against: the locked books' free stock, the recorded lines, the cancellations. */
interface ReservationState {
  /** Free stock per locked book, less what earlier lines of the batch took. */
  readonly available: Map<string, number>;
  /** Reservations per line (lineKey), recorded or made by an earlier line of the batch. */
  readonly reservations: Map<string, { quantity: number; reservedBy: string; released: boolean }>;
  /** The first cancellation's message id, by order id (whole order) or by line. */
  readonly cancelled: ReadonlyMap<string, string>;
}

function recordedReservation(row: ReservationRow): { quantity: number; reservedBy: string; released: boolean } {
  return { quantity: row.quantity, reservedBy: row.reserved_by, released: row.released_at !== null };
}

/** Decides one line, in batch order: a reservation it makes is taken from `state` for the lines after it. */
function decideReservation(state: ReservationState, { orderId, bookId, quantity, messageId }: ReserveCommand): ReserveOutcome {
  const line = lineKey(orderId, bookId);
  const prior = state.reservations.get(line);
  const free = state.available.get(bookId);
  const cancelledBy = state.cancelled.get(orderId) ?? state.cancelled.get(line);
  // A cancelled order stays cancelled: a placement processed after it is refused, even a producer
  // duplicate of a line that was reserved and then released by that cancellation (already-reserved
  // would tell the sender its stock is held, and it is not). Another producer's message id is never
  // named: the outcome still says what happened to the order.
  if (cancelledBy !== undefined && (prior === undefined || prior.released)) {
    return { result: 'order-cancelled', orderId, bookId, quantity, ...(sameKeySpace(cancelledBy, messageId) ? { cancelledBy } : {}) };
  }
  if (prior !== undefined) {
    const { quantity: reservedQuantity, reservedBy, released } = prior;
    const named = sameKeySpace(reservedBy, messageId) ? { reservedBy } : {};
    return { result: 'already-reserved', orderId, bookId, quantity, existing: { quantity: reservedQuantity, ...named, released } };
  }
  if (free === undefined) return { result: 'unknown-book', orderId, bookId, quantity };
  if (free < quantity) return { result: 'insufficient-stock', orderId, bookId, quantity, available: free };
  state.available.set(bookId, free - quantity);
  state.reservations.set(line, { quantity, reservedBy: messageId, released: false });
  return { result: 'reserved', orderId, bookId, quantity };
}

/**
 * Writes what the batch reserved: one multi-row insert of the new reservations, one update of the
 * books' reserved counts (each within the parameter limit). Nothing when nothing was reserved.
 */
async function applyReservations(
  trx: Tx,
  commands: readonly ReserveCommand[],
  outcomes: readonly ReserveOutcome[],
  now: Date,
  given: DeferredWrites | undefined,
): Promise<void> {
  const added = new Map<string, number>();
  const inserts: Insertable<Database['stock_reservations']>[] = [];
  commands.forEach(({ orderId, bookId, quantity, messageId }, i) => {
    if (outcomes[i]!.result !== 'reserved') return;
    added.set(bookId, (added.get(bookId) ?? 0) + quantity);
    inserts.push({
      order_id: orderId,
      book_id: bookId,
      quantity,
      reserved_by: messageId,
      reserved_at: now,
      released_by: null,
      released_at: null,
    });
  });
  if (inserts.length === 0) return;
  // Nothing reads these back in the transaction: they may go with the inbox's completion.
  const writes = given ?? new DeferredWrites(trx);
  await insertRows(trx, 'stock_reservations', inserts, writes);
  await addReserved(writes, trx, [...added], now);
  if (given === undefined) await writes.flush();
}

/**
 * The reservations recorded for the lines' orders and books (`orders` and `books` as the batch lists
 * them), read in as many statements as the parameter limit needs, each for a run of the lines.
 */
interface ReservationRow {
  order_id: string;
  book_id: string;
  quantity: number;
  reserved_by: string;
  released_at: Date | null;
}

async function findReservations(
  trx: Tx,
  lines: readonly ReserveCommand[],
  orders: readonly string[],
  books: readonly string[],
): Promise<ReservationRow[]> {
  const found: ReservationRow[] = [];
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

/** addReserved's update: each book's reserved count plus its increment, the time the same for all. */
const ADD_RESERVED: KeyedUpdate = {
  table: 'stock_items',
  key: { column: 'book_id', type: 'uuid' },
  set: [
    { column: 'reserved', from: 'row', type: 'integer', add: true },
    { column: 'updated_at', from: 'bound' },
  ],
  where: [],
};

/** Adds each book's reserved quantity; every locked book must change. */
async function addReserved(writes: DeferredWrites, trx: Tx, increments: readonly (readonly [string, number])[], now: Date): Promise<void> {
  const rows = increments.map(([key, quantity]) => ({ key, values: [quantity] }));
  for (const write of updateByKey(trx, ADD_RESERVED, rows, { set: [now], where: [] })) {
    const what = write.rows === 1 ? 'reserving stock on the locked book' : 'reserving stock on the locked books';
    await writes.add(write.query, { rows: write.rows, what });
  }
}

/** A recorded cancellation of a whole order (book_id null) or of one line. */
interface CancellationRow {
  order_id: string;
  book_id: string | null;
  cancelled_at: Date;
  cancelled_by: string;
}

/** The orders' recorded cancellations, in as many statements as the parameter limit needs. */
async function findCancellations(trx: Tx, orders: readonly string[]): Promise<CancellationRow[]> {
  const rows = [];
  for (const chunk of parameterChunks(trx, orders, 1)) {
    rows.push(
      ...(await trx
        .selectFrom('order_cancellations')
        .select(['order_id', 'book_id', 'cancelled_at', 'cancelled_by'])
        .where('order_id', 'in', chunk)
        .execute()),
    );
  }
  return rows;
}

/** A row of readLines' UNION ALL: a reservation's columns or a cancellation's, as `kind` says. */
interface LineRow {
  kind: string;
  order_id: string;
  book_id: string | null;
  quantity: number | null;
  reserved_by: string | null;
  released_at: Date | null;
  cancelled_at: Date | null;
  cancelled_by: string | null;
}

/**
 * What a reservation decides on, read after the stock rows are locked: the reservations recorded for
 * the lines' orders and books, and the orders' cancellations. On PostgreSQL both are one statement
 * (UNION ALL, a row's `kind` telling which, the orders and the books as two array parameters); on SQL
 * Server each goes in its own statements, within the parameter limit.
 */
async function readLines(
  trx: Tx,
  lines: readonly ReserveCommand[],
  orders: readonly string[],
  books: readonly string[],
): Promise<{ reservations: ReservationRow[]; cancellations: CancellationRow[] }> {
  // One statement where the engine binds key lists as arrays: the orders bound once for both parts.
  const query = unionByKeys(trx, LINES, [orders, books]);
  if (query === undefined) {
    return { reservations: await findReservations(trx, lines, orders, books), cancellations: await findCancellations(trx, orders) };
  }
  return splitLines((await trx.executeQuery<LineRow>(query)).rows);
}

/** readLines's union: the lines' reservations (by order, key list 0, and book, key list 1) and the orders' cancellations. */
const LINES: KeyedUnion = {
  columns: [
    { name: 'order_id', type: 'text' },
    { name: 'book_id', type: 'text' },
    { name: 'quantity', type: 'integer' },
    { name: 'reserved_by', type: 'text' },
    { name: 'released_at', type: 'timestamp' },
    { name: 'cancelled_at', type: 'timestamp' },
    { name: 'cancelled_by', type: 'text' },
  ],
  parts: [
    {
      table: 'stock_reservations',
      kind: 'reservation',
      columns: ['order_id', 'book_id', 'quantity', 'reserved_by', 'released_at'],
      match: [
        ['order_id', 0],
        ['book_id', 1],
      ],
    },
    {
      table: 'order_cancellations',
      kind: 'cancellation',
      columns: ['order_id', 'book_id', 'cancelled_at', 'cancelled_by'],
      match: [['order_id', 0]],
    },
  ],
};

/** The rows of the UNION ALL in readLines, told apart by their `kind`. */
function splitLines(rows: readonly LineRow[]): { reservations: ReservationRow[]; cancellations: CancellationRow[] } {
  const reservations: ReservationRow[] = [];
  const cancellations: CancellationRow[] = [];
  for (const row of rows) {
    if (row.kind === 'reservation') {
      reservations.push({
        order_id: row.order_id,
        book_id: row.book_id!,
        quantity: row.quantity!,
        reserved_by: row.reserved_by!,
        released_at: row.released_at,
      });
    } else {
      cancellations.push({
        order_id: row.order_id,
        book_id: row.book_id,
        cancelled_at: row.cancelled_at!,
        cancelled_by: row.cancelled_by!,
      });
    }
  }
  return { reservations, cancellations };
}

/**
 * The message id of each order's (or order line's) first cancellation: by order id where the whole
 * order was cancelled, by line where that book was; whichever statement read it.
 */
function firstCancellations(rows: CancellationRow[]): Map<string, string> {
  rows.sort(
    (a, b) =>
      a.cancelled_at.getTime() - b.cancelled_at.getTime() ||
      (a.cancelled_by < b.cancelled_by ? -1 : a.cancelled_by > b.cancelled_by ? 1 : 0),
  );
  const cancelled = new Map<string, string>();
  for (const row of rows) {
    const key = row.book_id === null ? row.order_id : lineKey(row.order_id, row.book_id);
    if (!cancelled.has(key)) cancelled.set(key, row.cancelled_by);
  }
  return cancelled;
}
