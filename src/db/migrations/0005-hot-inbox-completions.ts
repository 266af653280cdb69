import type { Kysely } from 'kysely';
import { coldInboxCompletions, hotInboxCompletions } from '../../inbox/migrations.js';

/** HOT completions of the inbox on PostgreSQL (see src/inbox/migrations.ts); nothing on SQL Server. */
export async function up(db: Kysely<any>): Promise<void> {
  await hotInboxCompletions(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await coldInboxCompletions(db);
}
