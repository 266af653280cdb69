/**
 * `npm run db:create`: creates the database DATABASE_URL names when it is missing, with the settings the
 * service needs (SQL Server: READ_COMMITTED_SNAPSHOT on; MariaDB and MySQL: utf8mb4 with the binary
 * collation, so keys compare byte for byte as on PostgreSQL). Run it once with a login that may create
 * databases; the service itself can then run as a user with rights on its own database only.
 * PostgreSQL and PGlite need nothing here (PGlite creates its directory; create a PostgreSQL database
 * with createdb).
 */
import { loadConfig } from '../src/config.js';
import { databaseKind } from '../src/schema/create-database.js';
import { createMssqlDatabase } from '../src/schema/mssql.js';
import { createMysqlDatabase } from '../src/schema/mysql.js';

const url = loadConfig().databaseUrl;
const kind = databaseKind(url);
if (kind === 'mysql') {
  await createMysqlDatabase(url);
  console.log('MariaDB/MySQL database is present (created if it was missing, utf8mb4 with utf8mb4_bin when created)');
} else if (kind === 'mssql') {
  await createMssqlDatabase(url);
  console.log('SQL Server database is present (created if it was missing, READ_COMMITTED_SNAPSHOT on when created)');
} else {
  console.log('nothing to do: db:create is for SQL Server, MariaDB and MySQL (PGlite creates its directory; use createdb for PostgreSQL)');
}
