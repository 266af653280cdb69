import { sql, type Kysely } from 'kysely';
import type { Migration } from 'kysely/migration';
import { ddlOf } from '../db/dialect.js';

/**
 * The inbox's own tables (schema.ts), on PostgreSQL, PGlite and SQL Server. An application runs
 * `inboxMigrations` beside its own migrations (Kysely's Migrator takes them all in one provider; the
 * names sort before an application's `0001-…`), or calls these steps from migrations of its own.
 */

/** The inbox (one row per message and consumer) and the dead letters (messages that must not be applied). */
export async function createInboxTables(db: Kysely<any>): Promise<void> {
  const t = ddlOf(db);
  if (t.clustersOnSurrogate) {
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
    .addColumn('id', sql.raw(t.identity), (c) => c.primaryKey())
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

/**
 * Why a message was dead-lettered, in words: the schema errors of a refused body, or the last error of
 * a command that failed on every delivery. Null for rows written before this column, and for key reuse
 * (the fingerprints say it).
 */
export async function addDeadLetterDetail(db: Kysely<any>): Promise<void> {
  const t = ddlOf(db);
  await db.schema
    .alterTable('dead_letters')
    .addColumn('detail', sql.raw(t.text(1000)))
    .execute();
}

export async function dropInboxTables(db: Kysely<any>): Promise<void> {
  for (const table of ['dead_letters', 'inbox']) await db.schema.dropTable(table).ifExists().execute();
}

/** The inbox's migrations, for an application's Kysely Migrator. */
export const inboxMigrations: Readonly<Record<string, Migration>> = {
  '0000-inbox-tables': {
    up: async (db) => {
      await createInboxTables(db);
      await addDeadLetterDetail(db);
    },
    down: dropInboxTables,
  },
};
