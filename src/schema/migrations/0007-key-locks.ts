import { sql, type Kysely } from 'kysely';
import { ddlOf, KEY_LOCK_TABLE } from '../../db/dialect.js';

/**
 * The rows lockKeys locks where the engine has no transaction-scoped named locks (MariaDB, MySQL: the
 * orders' locks, see src/inventory/order-locks.ts): one row per resource, kept until retention finds it unused. Nothing
 * on engines with advisory locks or application locks.
 */
export async function up(db: Kysely<any>): Promise<void> {
  const t = ddlOf(db);
  if (!t.keyLockTable) return;
  await db.schema
    .createTable(KEY_LOCK_TABLE)
    .addColumn('resource', sql.raw(t.key(300)), (c) => c.primaryKey())
    // When a transaction last locked the row: retention (src/retention.ts) removes rows unused for longer
    // than the inbox keeps its records, so the table grows with the orders in that window, not forever.
    .addColumn('locked_at', sql.raw(t.timestamp), (c) => c.notNull().defaultTo(sql`CURRENT_TIMESTAMP(3)`))
    .execute();
  await db.schema.createIndex(`${KEY_LOCK_TABLE}_locked_at`).on(KEY_LOCK_TABLE).column('locked_at').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  if (ddlOf(db).keyLockTable) await db.schema.dropTable(KEY_LOCK_TABLE).ifExists().execute();
}
