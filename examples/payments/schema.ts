import { sql, type ColumnType, type Kysely } from 'kysely';
import { Migrator, type Migration } from 'kysely/migration';
import { inboxMigrations, type InboxTables } from 'bookstore-inventory/inbox';

/**
 * The payments receiver's tables beside the inbox's. A balance is a bigint: the driver reads it back as
 * a string (it may exceed 2^53), so it is written as a number and read as a string or a number.
 */
export interface AccountsTable {
  account_id: string;
  balance_cents: ColumnType<string | number, number, number>;
}

/** One row per payment ever credited: the payment id is the business key a producer duplicate repeats. */
export interface CreditsTable {
  payment_id: string;
  account_id: string;
  amount_cents: ColumnType<string | number, number, never>;
  /** The message that credited it, so a later copy under another message id can say which one did. */
  message_id: string;
  credited_at: Date;
}

export interface Database extends InboxTables {
  accounts: AccountsTable;
  credits: CreditsTable;
}

/** The inbox's migrations ('0000-inbox-tables') first, then the receiver's own: one Migrator runs them all. */
export const paymentsMigrations: Readonly<Record<string, Migration>> = {
  ...inboxMigrations,
  '0001-payments-tables': {
    up: async (db) => {
      await db.schema
        .createTable('accounts')
        .addColumn('account_id', 'text', (c) => c.primaryKey())
        .addColumn('balance_cents', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema
        .createTable('credits')
        .addColumn('payment_id', 'text', (c) => c.primaryKey())
        .addColumn('account_id', 'text', (c) => c.notNull())
        .addColumn('amount_cents', 'bigint', (c) => c.notNull().check(sql`amount_cents > 0`))
        .addColumn('message_id', 'text', (c) => c.notNull())
        .addColumn('credited_at', 'timestamptz', (c) => c.notNull())
        .execute();
    },
    down: async (db) => {
      await db.schema.dropTable('credits').execute();
      await db.schema.dropTable('accounts').execute();
    },
  },
};

/** Applies every pending migration, the inbox's among them. */
export async function migrateToLatest(db: Kysely<Database>): Promise<void> {
  const migrator = new Migrator({ db, provider: { getMigrations: async () => ({ ...paymentsMigrations }) } });
  const { error, results } = await migrator.migrateToLatest();
  if (error !== undefined) {
    // A migration that failed is named; an error before any ran (the database unreachable) is thrown as it is.
    const failed = results?.find((r) => r.status === 'Error');
    if (failed === undefined && error instanceof Error) throw error;
    throw new Error(`migration ${failed?.migrationName ?? '(none)'} failed`, { cause: error });
  }
}
