import type { Kysely } from 'kysely';
import { addDeadLetterDetail } from '../../inbox/machinery.js';

/** The dead letters' detail column (see src/inbox/migrations.ts). */
export async function up(db: Kysely<any>): Promise<void> {
  await addDeadLetterDetail(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('dead_letters').dropColumn('detail').execute();
}
