import { sql, type Kysely } from 'kysely';
import { ddlOf } from '../../db/dialect.js';

/**
 * Cancellations, kept so that one that arrives before its order still wins: redelivery and requeueing
 * reorder messages, and an OrderPlaced processed after the OrderCancelled of its order must be refused,
 * not reserve stock for a cancelled order. One row per cancellation message; `book_id` NULL cancels the
 * whole order (every line of it, whenever it arrives), a book id only that line.
 */
export async function up(db: Kysely<any>): Promise<void> {
  const t = ddlOf(db);
  await db.schema
    .createTable('order_cancellations')
    .addColumn('order_id', sql.raw(t.uuid), (c) => c.notNull())
    .addColumn('book_id', sql.raw(t.uuid))
    .addColumn('cancelled_by', sql.raw(t.key(200)), (c) => c.notNull())
    .addColumn('cancelled_at', sql.raw(t.timestamp), (c) => c.notNull())
    // Leads with order_id: a reservation looks its orders' cancellations up by this key's prefix.
    .addPrimaryKeyConstraint('order_cancellations_pk', ['order_id', 'cancelled_by'])
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('order_cancellations').ifExists().execute();
}
