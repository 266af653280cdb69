import { sql, type Kysely } from 'kysely';
import { ddlOf, KEY_LOCK_TABLE } from '../../db/dialect.js';

/**
 * The rows lockKeys locks where the engine has no transaction-scoped named locks (MariaDB, MySQL: the
 * orders' locks, see src/inventory/order-locks.ts): one row per resource, kept once written. Nothing
 * on engines with advisory locks or application locks.
 */
export async function up(db: Kysely<any>): Promise<void> {
  const t = ddlOf(db);
  if (!t.keyLockTable) return;
  await db.schema
    .createTable(KEY_LOCK_TABLE)
    .addColumn('resource', sql.raw(t.key(300)), (c) => c.primaryKey())
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  if (ddlOf(db).keyLockTable) await db.schema.dropTable(KEY_LOCK_TABLE).ifExists().execute();
}
