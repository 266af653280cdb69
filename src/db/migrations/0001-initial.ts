import { sql, type Kysely } from 'kysely';
import { columnTypes, dialectOf } from '../dialect.js';

/** Stock, reservations, the inbox and dead letters. */
export async function up(db: Kysely<any>): Promise<void> {
  const dialect = dialectOf(db);
  const t = columnTypes(dialect);

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

  if (dialect === 'mssql') {
    // A clustered index on random message ids fragments; cluster on an ever-increasing surrogate and
    // keep the composite key as a nonclustered primary key.
    await sql`
      CREATE TABLE inbox (
        id bigint IDENTITY(1,1) NOT NULL,
        message_id ${sql.raw(t.key(200))} NOT NULL,
        consumer ${sql.raw(t.key(100))} NOT NULL,
        key_source ${sql.raw(t.key(32))} NOT NULL,
        fingerprint ${sql.raw(t.key(64))} NOT NULL,
        received_at ${sql.raw(t.timestamp)} NOT NULL,
        completed_at ${sql.raw(t.timestamp)} NULL,
        outcome ${sql.raw(t.json)} NULL,
        attempts int NOT NULL DEFAULT 1,
        lease_until ${sql.raw(t.timestamp)} NULL,
        CONSTRAINT inbox_pk PRIMARY KEY NONCLUSTERED (message_id, consumer)
      )`.execute(db);
    await sql`CREATE UNIQUE CLUSTERED INDEX inbox_clustered ON inbox (id)`.execute(db);
  } else {
    await db.schema
      .createTable('inbox')
      .addColumn('message_id', sql.raw(t.key(200)), (c) => c.notNull())
      .addColumn('consumer', sql.raw(t.key(100)), (c) => c.notNull())
      .addColumn('key_source', sql.raw(t.key(32)), (c) => c.notNull())
      .addColumn('fingerprint', sql.raw(t.key(64)), (c) => c.notNull())
      .addColumn('received_at', sql.raw(t.timestamp), (c) => c.notNull())
      .addColumn('completed_at', sql.raw(t.timestamp))
      .addColumn('outcome', sql.raw(t.json))
      .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(1))
      .addColumn('lease_until', sql.raw(t.timestamp))
      .addPrimaryKeyConstraint('inbox_pk', ['message_id', 'consumer'])
      .execute();
  }
  // Retention deletes completed rows by age; operators list in-progress rows by age.
  await db.schema.createIndex('inbox_completed_at').on('inbox').columns(['completed_at']).execute();
  await db.schema.createIndex('inbox_received_at').on('inbox').columns(['received_at']).execute();

  await db.schema
    .createTable('dead_letters')
    .addColumn('id', dialect === 'mssql' ? sql`bigint identity(1,1)` : 'bigserial', (c) => c.primaryKey())
    .addColumn('consumer', sql.raw(t.key(100)), (c) => c.notNull())
    .addColumn('message_id', sql.raw(t.key(200)), (c) => c.notNull())
    .addColumn('key_source', sql.raw(t.key(32)), (c) => c.notNull())
    .addColumn('payload', sql.raw(t.json), (c) => c.notNull())
    .addColumn('stored_fingerprint', sql.raw(t.key(64)), (c) => c.notNull())
    .addColumn('received_fingerprint', sql.raw(t.key(64)), (c) => c.notNull())
    .addColumn('reason', sql.raw(t.key(64)), (c) => c.notNull())
    .addColumn('received_at', sql.raw(t.timestamp), (c) => c.notNull())
    .execute();
  await db.schema.createIndex('dead_letters_received_at').on('dead_letters').columns(['received_at']).execute();
  await db.schema.createIndex('dead_letters_consumer').on('dead_letters').columns(['consumer', 'id']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const table of ['dead_letters', 'inbox', 'stock_reservations', 'stock_items']) {
    await db.schema.dropTable(table).ifExists().execute();
  }
}
