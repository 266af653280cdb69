import { sql, type Kysely } from 'kysely';
import { createInboxTables } from '../../inbox/machinery.js';
import { ddlOf } from '../../db/dialect.js';

/** Stock, reservations, the inbox and dead letters. */
export async function up(db: Kysely<any>): Promise<void> {
  const t = ddlOf(db);

  await db.schema
    .createTable('stock_items')
    .addColumn('book_id', sql.raw(t.uuid), (c) => c.primaryKey())
    .addColumn('title', sql.raw(t.text(300)), (c) => c.notNull())
    .addColumn('on_hand', 'integer', (c) => c.notNull())
    .addColumn('reserved', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('updated_at', sql.raw(t.timestamp), (c) => c.notNull())
    .addCheckConstraint('stock_items_counts', sql`reserved >= 0 and reserved <= on_hand`)
    .execute();

  // Unique per (order, book): a producer duplicate under a new message id cannot reserve twice.
  // Released reservations stay, so a late OrderPlaced copy cannot reserve a cancelled order again.
  await db.schema
    .createTable('stock_reservations')
    .addColumn('order_id', sql.raw(t.uuid), (c) => c.notNull())
    .addColumn('book_id', sql.raw(t.uuid), (c) => c.notNull())
    .addColumn('quantity', 'integer', (c) => c.notNull())
    .addColumn('reserved_by', sql.raw(t.key(200)), (c) => c.notNull())
    .addColumn('reserved_at', sql.raw(t.timestamp), (c) => c.notNull())
    .addColumn('released_by', sql.raw(t.key(200)))
    .addColumn('released_at', sql.raw(t.timestamp))
    .addPrimaryKeyConstraint('stock_reservations_pk', ['order_id', 'book_id'])
    .addCheckConstraint('stock_reservations_quantity', sql`quantity > 0`)
    .execute();
  await db.schema.createIndex('stock_reservations_book').on('stock_reservations').columns(['book_id']).execute();

  // The inbox's tables as they were first created; 0004 adds the dead letters' detail.
  await createInboxTables(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const table of ['dead_letters', 'inbox', 'stock_reservations', 'stock_items']) {
    await db.schema.dropTable(table).ifExists().execute();
  }
}
