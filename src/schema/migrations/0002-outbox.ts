import { sql, type Kysely } from 'kysely';
import { ddlOf } from '../../db/dialect.js';

/**
 * The outbox: events written in the same transaction as the stock change that caused them, published
 * to the broker afterwards by the relay. `seq` orders them (per book, the order of the commits that
 * changed that book's stock); `id` is the event id consumers deduplicate by.
 */
export async function up(db: Kysely<any>): Promise<void> {
  const t = ddlOf(db);
  const columns = sql`
    type ${sql.raw(t.key(100))} NOT NULL,
    source ${sql.raw(t.key(200))} NOT NULL,
    ordering_key ${sql.raw(t.key(100))} NOT NULL,
    consumer ${sql.raw(t.key(100))} NOT NULL,
    causation_id ${sql.raw(t.key(200))} NOT NULL,
    data ${sql.raw(t.json)} NOT NULL,
    occurred_at ${sql.raw(t.timestamp)} NOT NULL,
    published_at ${sql.raw(t.timestamp)} NULL,
    attempts int NOT NULL DEFAULT 0,
    last_error ${sql.raw(t.text(1000))} NULL,
    last_attempt_at ${sql.raw(t.timestamp)} NULL`;

  if (t.clustersOnSurrogate) {
    // As for the inbox: cluster on the ever-increasing seq, keep the random event id nonclustered.
    await sql`
      CREATE TABLE outbox (
        seq bigint IDENTITY(1,1) NOT NULL,
        id uniqueidentifier NOT NULL,
        ${columns},
        CONSTRAINT outbox_pk PRIMARY KEY NONCLUSTERED (id)
      )`.execute(db);
    await sql`CREATE UNIQUE CLUSTERED INDEX outbox_clustered ON outbox (seq)`.execute(db);
  } else {
    await sql`
      CREATE TABLE outbox (
        seq ${sql.raw(t.identity)} NOT NULL,
        id ${sql.raw(t.uuid)} NOT NULL,
        ${columns},
        CONSTRAINT outbox_pk PRIMARY KEY (id),
        CONSTRAINT outbox_seq UNIQUE (seq)
      )`.execute(db);
  }
  if (!t.filteredIndexes) {
    // No partial indexes (MariaDB, MySQL): the same lookups lead with published_at instead.
    await db.schema.createIndex('outbox_pending').on('outbox').columns(['published_at', 'seq']).execute();
    await db.schema.createIndex('outbox_pending_by_key').on('outbox').columns(['ordering_key', 'published_at', 'seq']).execute();
    await db.schema.createIndex('outbox_published_at').on('outbox').column('published_at').execute();
    return;
  }
  // Pending events only (filtered/partial indexes stay small however many published rows wait for
  // retention): the relay claims the oldest by seq, and checks a book's next pending event by key.
  await db.schema.createIndex('outbox_pending').on('outbox').column('seq').where(sql.ref('published_at'), 'is', null).execute();
  await db.schema
    .createIndex('outbox_pending_by_key')
    .on('outbox')
    .columns(['ordering_key', 'seq'])
    .where(sql.ref('published_at'), 'is', null)
    .execute();
  // Retention deletes published rows by age.
  await db.schema
    .createIndex('outbox_published_at')
    .on('outbox')
    .column('published_at')
    .where(sql.ref('published_at'), 'is not', null)
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('outbox').ifExists().execute();
}
