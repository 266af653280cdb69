import type { ColumnType, Generated, Kysely, Selectable, Transaction } from 'kysely';
import type { InboxTables, JsonColumn } from '../inbox/machinery.js';

export type { DeadLetterRow, InboxRow, JsonColumn } from '../inbox/machinery.js';

/** Row shapes as the database stores them; API shapes live in the routes and are mapped explicitly. */

export interface StockItemsTable {
  book_id: string;
  title: string;
  on_hand: number;
  reserved: number;
  updated_at: Date;
}

export interface StockReservationsTable {
  order_id: string;
  book_id: string;
  quantity: number;
  reserved_by: string;
  reserved_at: Date;
  released_by: string | null;
  released_at: Date | null;
}

/** A cancellation, kept so that a placement processed after it is refused (see migration 0003). */
export interface OrderCancellationsTable {
  order_id: string;
  /** NULL: the whole order. */
  book_id: string | null;
  cancelled_by: string;
  cancelled_at: Date;
}

export interface OutboxTable {
  seq: Generated<number | string>;
  id: string;
  type: string;
  source: string;
  /** Events with the same key are published in seq order (the book id). */
  ordering_key: string;
  consumer: string;
  /** The message id of the command that caused the event. */
  causation_id: string;
  data: JsonColumn;
  occurred_at: Date;
  published_at: Date | null;
  attempts: ColumnType<number, number | undefined, number>;
  last_error: string | null;
  last_attempt_at: Date | null;
  /** The W3C `traceparent` of the command that caused the event (null: written while tracing was off). */
  trace_parent: ColumnType<string | null, string | null | undefined, string | null>;
  /** Its `tracestate`, when the trace carries one. */
  trace_state: ColumnType<string | null, string | null | undefined, string | null>;
}

/**
 * The rows the orders' locks take where the engine has no transaction-scoped named locks (MariaDB,
 * MySQL; migration 0007): absent on the other engines.
 */
export interface KeyLocksTable {
  resource: string;
  locked_at: ColumnType<Date, Date | undefined, Date>;
}

/** The bookstore's tables beside the inbox's own (src/inbox/schema.ts). */
export interface Database extends InboxTables {
  stock_items: StockItemsTable;
  stock_reservations: StockReservationsTable;
  order_cancellations: OrderCancellationsTable;
  outbox: OutboxTable;
  key_locks: KeyLocksTable;
}

export type Db = Kysely<Database>;
export type Tx = Transaction<Database>;
export type StockItemRow = Selectable<StockItemsTable>;
export type ReservationRow = Selectable<StockReservationsTable>;
export type OutboxRow = Selectable<OutboxTable>;

/** The name of every JsonColumn of the schema. */
type JsonColumnName = {
  [T in keyof Database]: { [C in keyof Database[T]]: Database[T][C] extends JsonColumn | null ? C : never }[keyof Database[T]];
}[keyof Database];

/** Every JsonColumn name, each once: the compiler refuses a missing or an extra one. */
const JSON_COLUMN_NAMES = { outcome: true, payload: true, data: true } satisfies Record<JsonColumnName, true>;

/**
 * The JSON columns, by name: SQL Server returns them as text, and its Kysely instance parses them
 * (ParseJsonColumnsPlugin, mssql.ts). No other column of the schema bears one of these names.
 */
export const JSON_COLUMNS: readonly string[] = Object.keys(JSON_COLUMN_NAMES);
