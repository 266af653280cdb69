import { sql, type Kysely } from 'kysely';
import { ddlOf } from '../../db/dialect.js';

/**
 * Indexes every command paid for and no query reads. Each is an entry written with every reservation
 * or every outbox event (and on PostgreSQL again with every publish, which is not a HOT update):
 * - `stock_reservations_book`: every query on reservations names the order, the primary key's first
 *   column; nothing looks reservations up by book alone.
 * - `outbox_seq` (PostgreSQL and PGlite): `seq` comes from its own sequence, so it is unique without the
 *   constraint, and the pending events, the only ones looked up by seq, have `outbox_pending`. On SQL
 *   Server seq is the clustered index and stays; on MariaDB and MySQL an AUTO_INCREMENT column must be
 *   a key, and it stays too.
 */
export async function up(db: Kysely<any>): Promise<void> {
  if (ddlOf(db).indexNamesPerTable) {
    // SQL Server, MariaDB and MySQL name an index within its table.
    await db.schema.dropIndex('stock_reservations_book').on('stock_reservations').execute();
    return;
  }
  await db.schema.dropIndex('stock_reservations_book').execute();
  await sql`ALTER TABLE outbox DROP CONSTRAINT outbox_seq`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  if (!ddlOf(db).indexNamesPerTable) await sql`ALTER TABLE outbox ADD CONSTRAINT outbox_seq UNIQUE (seq)`.execute(db);
  await db.schema.createIndex('stock_reservations_book').on('stock_reservations').columns(['book_id']).execute();
}
