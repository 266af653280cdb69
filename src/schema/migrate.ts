import type { Kysely } from 'kysely';
import type { Database } from './database.js';
import { Migrator, type Migration, type MigrationProvider } from 'kysely/migration';
import * as initial from './migrations/0001-initial.js';
import * as outbox from './migrations/0002-outbox.js';
import * as orderCancellations from './migrations/0003-order-cancellations.js';
import * as deadLetterDetail from './migrations/0004-dead-letter-detail.js';
import * as fewerWriteIndexes from './migrations/0005-fewer-write-indexes.js';
import * as outboxTraceContext from './migrations/0006-outbox-trace-context.js';
import * as keyLocks from './migrations/0007-key-locks.js';

/** Migrations are imported statically so the compiled build carries them with no file scanning. */
const migrations: Record<string, Migration> = {
  '0001-initial': initial,
  '0002-outbox': outbox,
  '0003-order-cancellations': orderCancellations,
  '0004-dead-letter-detail': deadLetterDetail,
  '0005-fewer-write-indexes': fewerWriteIndexes,
  '0006-outbox-trace-context': outboxTraceContext,
  '0007-key-locks': keyLocks,
};

/** The migrations' names, in the order they apply. */
export const MIGRATION_NAMES: readonly string[] = Object.keys(migrations);

const provider: MigrationProvider = { getMigrations: async () => migrations };

export class MigrationError extends Error {
  override readonly name = 'MigrationError';
}

/** Applies every pending migration; throws MigrationError naming the one that failed. */
export async function migrateToLatest(db: Kysely<Database>): Promise<string[]> {
  const migrator = new Migrator({ db, provider });
  const { error, results } = await migrator.migrateToLatest();
  const failed = results?.find((r) => r.status === 'Error');
  if (error !== undefined) {
    throw new MigrationError(`migration ${failed?.migrationName ?? '(unknown)'} failed`, { cause: error });
  }
  return (results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName);
}

/** The names of migrations not yet applied (readiness requires none). */
export async function pendingMigrations(db: Kysely<Database>): Promise<string[]> {
  const migrator = new Migrator({ db, provider });
  const all = await migrator.getMigrations();
  return all.filter((m) => m.executedAt === undefined).map((m) => m.name);
}
