import { MysqlAdapter, sql, type ColumnType, type Kysely } from 'kysely';
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

/** Anything that runs queries: a Kysely instance or a transaction, of any schema. */
type Runs = Pick<Kysely<Database>, 'getExecutor'>;

/** Whether `db` runs on MariaDB or MySQL (Kysely's MysqlDialect). */
export function isMysql(db: Runs): boolean {
  return db.getExecutor().adapter instanceof MysqlAdapter;
}

/**
 * Column types: PostgreSQL's text and timestamptz; on MariaDB/MySQL a key cannot be a TEXT column, so
 * keys are bounded varchars (the payment event's schema bounds them), and instants are datetime(6) in UTC.
 */
function columnTypes(db: Runs): { key: string; instant: string } {
  return isMysql(db) ? { key: 'varchar(200)', instant: 'datetime(6)' } : { key: 'text', instant: 'timestamptz' };
}

/** The inbox's migrations ('0000-inbox-tables') first, then the receiver's own: one Migrator runs them all. */
export const paymentsMigrations: Readonly<Record<string, Migration>> = {
  ...inboxMigrations,
  '0001-payments-tables': {
    up: async (db) => {
      const t = columnTypes(db);
      await db.schema
        .createTable('accounts')
        .addColumn('account_id', sql.raw(t.key), (c) => c.primaryKey())
        .addColumn('balance_cents', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema
        .createTable('credits')
        .addColumn('payment_id', sql.raw(t.key), (c) => c.primaryKey())
        .addColumn('account_id', sql.raw(t.key), (c) => c.notNull())
        .addColumn('amount_cents', 'bigint', (c) => c.notNull().check(sql`amount_cents > 0`))
        .addColumn('message_id', sql.raw(t.key), (c) => c.notNull())
        .addColumn('credited_at', sql.raw(t.instant), (c) => c.notNull())
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
