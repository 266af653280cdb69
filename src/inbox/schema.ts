import type { ColumnType, Generated, Kysely, Selectable, Transaction } from 'kysely';

/**
 * The inbox's own tables, as the database stores them. An application's Kysely schema includes these
 * beside its own tables (`interface Database extends InboxTables { ... }`); the inbox reads and writes
 * nothing else. Their DDL is in migrations.ts.
 */

/** JSON columns: jsonb on PostgreSQL (read back parsed), nvarchar(max) on SQL Server (parsed by the dialect). */
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

export interface InboxTables {
  inbox: InboxTable;
  dead_letters: DeadLettersTable;
}

/** Any database whose schema holds the inbox tables, seen through them alone. */
export type InboxDb = Kysely<InboxTables>;
/** A transaction on such a database. */
export type InboxTx = Transaction<InboxTables>;
export type InboxRow = Selectable<InboxTable>;
export type DeadLetterRow = Selectable<DeadLettersTable>;
