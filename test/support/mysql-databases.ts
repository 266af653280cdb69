import { randomBytes } from 'node:crypto';
import { createConnection, type Connection } from 'mysql2/promise';
import { createDatabaseStatement, parseMysqlUrl } from '../../src/schema/mysql.js';

/**
 * MariaDB/MySQL for the tests: TEST_MYSQL_URL names a server and a database the tests may connect to
 * (mysql://root@127.0.0.1:3306/test in .ci/run); each test makes its own fresh database there and
 * drops it after. With REQUIRE_MYSQL=1 (as in .ci/run) a missing URL fails the run instead of
 * skipping the MariaDB tests.
 */
export const mysqlUrl = process.env.TEST_MYSQL_URL;

/** Why the MariaDB/MySQL tests cannot run, or false when they can; throws when REQUIRE_MYSQL=1 and they cannot. */
export function skipUnlessMysql(): string | false {
  if (mysqlUrl) return false;
  if (process.env.REQUIRE_MYSQL === '1') {
    throw new Error('REQUIRE_MYSQL=1 but TEST_MYSQL_URL is not set: the MariaDB/MySQL tests would be skipped');
  }
  return 'TEST_MYSQL_URL is not set';
}

export interface MysqlTestDatabase {
  /** The fresh database's name. */
  readonly name: string;
  /** Its URL, for createDatabase or a server process started by a test. */
  readonly url: string;
  /** A new connection to it, outside any pool: the test closes it (end() or destroy()). */
  connect(): Promise<Connection>;
  /** Drops the database. */
  drop(): Promise<void>;
}

/** A new empty database on the TEST_MYSQL_URL server (utf8mb4_bin, as db:create makes it). */
export async function mysqlTestDatabase(): Promise<MysqlTestDatabase> {
  if (!mysqlUrl) throw new Error('TEST_MYSQL_URL is not set');
  const baseUrl = mysqlUrl;
  const name = `bookstore_test_${Date.now().toString(36)}_${randomBytes(4).toString('hex')}`;
  await withAdmin(baseUrl, (admin) => admin.query(createDatabaseStatement(name)));
  const url = new URL(baseUrl.replace(/^mariadb:/, 'mysql:'));
  url.pathname = `/${name}`;
  const settings = parseMysqlUrl(url.toString());
  return {
    name,
    url: url.toString(),
    connect: () =>
      createConnection({
        ...(settings.socketPath === undefined ? { host: settings.host, port: settings.port } : { socketPath: settings.socketPath }),
        user: settings.user,
        password: settings.password,
        database: name,
      }),
    drop: () => withAdmin(baseUrl, (admin) => admin.query(`DROP DATABASE IF EXISTS \`${name}\``)),
  };
}

async function withAdmin(baseUrl: string, run: (admin: Connection) => Promise<unknown>): Promise<void> {
  const s = parseMysqlUrl(baseUrl);
  const admin = await createConnection({
    ...(s.socketPath === undefined ? { host: s.host, port: s.port } : { socketPath: s.socketPath }),
    user: s.user,
    password: s.password,
    database: s.database,
  });
  try {
    await run(admin);
  } finally {
    await admin.end();
  }
}
