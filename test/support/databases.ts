import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { sql } from 'kysely';
import pg from 'pg';
import { createDatabase, type DatabaseHandle } from '../../src/schema/create-database.js';
import { parseMssqlUrl } from '../../src/schema/mssql.js';
import { mysqlTestDatabase, mysqlUrl, skipUnlessMysql } from './mysql-databases.js';

/**
 * The databases the integration suite runs on: embedded PGlite always, PostgreSQL when
 * TEST_POSTGRES_URL is set (required when REQUIRE_POSTGRES=1, as in .ci/run), SQL Server when
 * MSSQL_URL (or a mssql:// DATABASE_URL) is set, MariaDB/MySQL when TEST_MYSQL_URL is set (required
 * when REQUIRE_MYSQL=1). Each `open()` gives a fresh, empty database.
 */
export type TestDatabaseName = 'pglite' | 'postgres' | 'mssql' | 'mysql';

export interface TestDatabase {
  readonly name: TestDatabaseName;
  /** A new empty database; close() drops it. */
  open(options?: { lockTimeoutMs?: number }): Promise<TestDatabaseHandle>;
}

export interface TestDatabaseHandle extends DatabaseHandle {
  /** The URL of this fresh database, for server processes started by a test. */
  readonly url: string;
}

export const postgresUrl = process.env.TEST_POSTGRES_URL;
export const mssqlUrl =
  process.env.MSSQL_URL ?? (/^(mssql|sqlserver):/.test(process.env.DATABASE_URL ?? '') ? process.env.DATABASE_URL : undefined);

if (process.env.REQUIRE_POSTGRES === '1' && !postgresUrl) {
  throw new Error('REQUIRE_POSTGRES=1 but TEST_POSTGRES_URL is not set: the PostgreSQL tests would be skipped');
}
// Throws when REQUIRE_MYSQL=1 and TEST_MYSQL_URL is not set.
const mysqlSkipReason = skipUnlessMysql();

function uniqueName(): string {
  return `bookstore_test_${Date.now().toString(36)}_${randomBytes(4).toString('hex')}`;
}

const pglite: TestDatabase = {
  name: 'pglite',
  async open() {
    const handle = await createDatabase('pglite:memory', { lockTimeoutMs: 5000 });
    return { ...handle, url: 'pglite:memory' };
  },
};

function postgres(adminUrl: string): TestDatabase {
  return {
    name: 'postgres',
    async open(options = {}) {
      const name = uniqueName();
      const admin = new pg.Client({ connectionString: adminUrl });
      await admin.connect();
      try {
        await admin.query(`CREATE DATABASE ${name}`);
      } finally {
        await admin.end();
      }
      const url = new URL(adminUrl);
      url.pathname = `/${name}`;
      const handle = await createDatabase(url.toString(), { lockTimeoutMs: options.lockTimeoutMs ?? 5000, poolMax: 10 });
      return {
        ...handle,
        url: url.toString(),
        async close() {
          await handle.close();
          const drop = new pg.Client({ connectionString: adminUrl });
          await drop.connect();
          try {
            await drop.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
          } finally {
            await drop.end();
          }
        },
      };
    },
  };
}

function mssql(baseUrl: string): TestDatabase {
  return {
    name: 'mssql',
    async open(options = {}) {
      const name = uniqueName();
      const url = new URL(baseUrl.replace(/^sqlserver:/, 'mssql:'));
      url.pathname = `/${name}`;
      // Asked to, createDatabase creates the missing database (READ_COMMITTED_SNAPSHOT on), as DATABASE_CREATE=true does.
      const handle = await createDatabase(url.toString(), { lockTimeoutMs: options.lockTimeoutMs ?? 5000, createDatabase: true });
      return {
        ...handle,
        url: url.toString(),
        async close() {
          await handle.close();
          const master = new URL(url);
          master.pathname = `/${parseMssqlUrl(baseUrl).database}`;
          const admin = await createDatabase(master.toString(), { lockTimeoutMs: 5000 });
          try {
            await sql`ALTER DATABASE ${sql.id(name)} SET SINGLE_USER WITH ROLLBACK IMMEDIATE; DROP DATABASE ${sql.id(name)}`.execute(
              admin.db,
            );
          } finally {
            await admin.close();
          }
        },
      };
    },
  };
}

const mysql: TestDatabase = {
  name: 'mysql',
  async open(options = {}) {
    const database = await mysqlTestDatabase();
    const handle = await createDatabase(database.url, { lockTimeoutMs: options.lockTimeoutMs ?? 5000, poolMax: 10 });
    return {
      ...handle,
      url: database.url,
      async close() {
        await handle.close();
        await database.drop();
      },
    };
  },
};

/** Every database configured for this run. */
export const testDatabases: TestDatabase[] = [
  pglite,
  ...(postgresUrl ? [postgres(postgresUrl)] : []),
  ...(mssqlUrl ? [mssql(mssqlUrl)] : []),
  ...(mysqlUrl ? [mysql] : []),
];

/** Server databases only: where two transactions really run at once and a second insert really blocks. */
export const serverDatabases: TestDatabase[] = testDatabases.filter((d) => d.name !== 'pglite');

/** The PostgreSQL target, if configured. */
export const postgresDatabase: TestDatabase | undefined = testDatabases.find((d) => d.name === 'postgres');

/** The databases this run leaves out, each with the reason. */
export const missingDatabases: readonly { name: 'postgres' | 'mssql' | 'mysql'; reason: string }[] = [
  ...(postgresUrl ? [] : [{ name: 'postgres' as const, reason: 'TEST_POSTGRES_URL is not set' }]),
  ...(mssqlUrl ? [] : [{ name: 'mssql' as const, reason: 'MSSQL_URL is not set' }]),
  ...(mysqlSkipReason === false ? [] : [{ name: 'mysql' as const, reason: mysqlSkipReason }]),
];

/** The reason to skip a PostgreSQL-only suite, or false when PostgreSQL is configured. */
export const skipUnlessPostgres: string | false = postgresUrl ? false : 'TEST_POSTGRES_URL is not set';

/**
 * For a file that runs its suite once per configured database: registers one skipped test per
 * database left out of this run, with the reason, so the run's summary counts what it did not cover.
 */
export function reportMissingDatabases(title: (name: string) => string, only?: readonly ('postgres' | 'mssql' | 'mysql')[]): void {
  for (const missing of missingDatabases) {
    if (only !== undefined && !only.includes(missing.name)) continue;
    test(title(missing.name), { skip: missing.reason }, () => {});
  }
}
