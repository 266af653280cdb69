import { sql, type Kysely } from 'kysely';
import { columnTypes, dialectOf } from '../dialect.js';

/**
 * Why a message was dead-lettered, in words: the schema errors of a refused body, or the last error of
 * a command that failed on every delivery. Null for rows written before this column, and for key reuse
 * (the fingerprints say it).
 */
export async function up(db: Kysely<any>): Promise<void> {
  const t = columnTypes(dialectOf(db));
  await db.schema
    .alterTable('dead_letters')
    .addColumn('detail', sql.raw(t.text(1000)))
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('dead_letters').dropColumn('detail').execute();
}
