import type { ColumnType, Generated, Insertable, Kysely, Selectable, Transaction } from 'kysely';

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

/** JSON columns: jsonb on PostgreSQL (read back parsed), nvarchar(max) on SQL Server (read back as text). */
export type JsonColumn = ColumnType<unknown, string, string>;

export interface InboxTable {
  message_id: string;
  consumer: string;
  key_source: string;
  fingerprint: string;
  received_at: Date;
  completed_at: Date | null;
  outcome: JsonColumn | null;
  attempts: ColumnType<number, number | undefined, number>;
  lease_until: Date | null;
}

export interface DeadLettersTable {
  id: Generated<number | string>;
  consumer: string;
  message_id: string;
  key_source: string;
  payload: JsonColumn;
  stored_fingerprint: string;
  received_fingerprint: string;
  reason: string;
  received_at: Date;
  detail: string | null;
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
}

export interface Database {
  stock_items: StockItemsTable;
  stock_reservations: StockReservationsTable;
  order_cancellations: OrderCancellationsTable;
  inbox: InboxTable;
  dead_letters: DeadLettersTable;
  outbox: OutboxTable;
}

export type Db = Kysely<Database>;
export type Tx = Transaction<Database>;
export type InboxRow = Selectable<InboxTable>;
export type NewInboxRow = Insertable<InboxTable>;
export type StockItemRow = Selectable<StockItemsTable>;
export type ReservationRow = Selectable<StockReservationsTable>;
export type DeadLetterRow = Selectable<DeadLettersTable>;
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
