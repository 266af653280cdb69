/** MariaDB/MySQL for a run: a given server (mysql:// or mariadb://), the run's database, the rows the checks read. */
import { randomBytes } from 'node:crypto';
import { createConnection, type Connection, type RowDataPacket } from 'mysql2/promise';
import { createDatabaseStatement, parseMysqlUrl } from '../../src/schema/mysql.js';
import type { DatabaseServer, InboxRow, ReservationRow, Rows, RunDatabase, StockRow } from './database.js';
import { describeError, say } from './log.js';

/** MariaDB's "Unknown thread id": the connection ended on its own before KILL reached it. */
const UNKNOWN_THREAD = 1094;

/** Runs `fn` on a connection of its own to the database `url` names, or to none (`database: false`). */
async function withConnection<T>(url: string, database: boolean, fn: (connection: Connection) => Promise<T>): Promise<T> {
  const s = parseMysqlUrl(url);
  const connection = await createConnection({
    ...(s.socketPath === undefined ? { host: s.host, port: s.port } : { socketPath: s.socketPath }),
    user: s.user,
    password: s.password,
    ...(database ? { database: s.database } : {}),
    connectTimeout: 5000,
    // Dates as instants, as pg reads timestamptz.
    timezone: 'Z',
  });
  // A fault may end this connection too; the error surfaces on the query, the listener keeps the process alive.
  connection.on('error', () => {});
  try {
    return await fn(connection);
  } finally {
    await connection.end().catch(() => connection.destroy());
  }
}

async function select<T>(connection: Connection, sql: string): Promise<T[]> {
  const [rows] = await connection.query<RowDataPacket[]>(sql);
  return rows as T[];
}

/** MariaDB stores a JSON column as text and hands it over so; MySQL's JSON type arrives parsed. */
function parsedJson(value: unknown): unknown {
  return typeof value === 'string' ? JSON.parse(value) : value;
}

/** The rows the checks read, from a MariaDB/MySQL connection. */
function mysqlRows(connection: Connection): Rows {
  return {
    reservations: () =>
      select<ReservationRow>(
        connection,
        'select order_id, book_id, quantity, reserved_by, released_by, released_at from stock_reservations',
      ),
    stock: () => select<StockRow>(connection, 'select book_id, on_hand, reserved from stock_items'),
    inbox: async () =>
      (await select<InboxRow>(connection, 'select message_id, consumer, completed_at, outcome from inbox')).map((row) => ({
        ...row,
        outcome: parsedJson(row.outcome),
      })),
    count: async (from) => Number((await select<{ n: number | string }>(connection, `select count(*) as n from ${from}`))[0]?.n ?? 0),
  };
}

/** Runs `fn` with the rows of the MariaDB/MySQL database at `url`. */
export function withMysqlRows<T>(url: string, fn: (rows: Rows) => Promise<T>): Promise<T> {
  return withConnection(url, true, (connection) => fn(mysqlRows(connection)));
}

/** The MariaDB/MySQL server at `adminUrl` (a user that may create databases and kill connections) as the server of a run. */
export function mysqlServer(adminUrl: string): DatabaseServer {
  const user = parseMysqlUrl(adminUrl).user;
  return {
    engine: 'mysql',
    adminUrl,
    server: undefined,
    connectionKillName: 'KILL CONNECTION',
    async createDatabase(prefix: string): Promise<RunDatabase> {
      const name = `${prefix}_${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
      await withConnection(adminUrl, false, (c) => c.query(createDatabaseStatement(name)));
      const url = new URL(adminUrl);
      url.pathname = `/${name}`;
      return { name, url: url.toString() };
    },
    async dropDatabase(database: RunDatabase): Promise<void> {
      await withConnection(adminUrl, false, (c) => c.query(`DROP DATABASE IF EXISTS \`${database.name}\``)).catch((error) =>
        say(`could not drop ${database.name}: ${describeError(error)}`),
      );
    },
    // The service's connections are those of its user on the run's database; this connection uses none.
    killServiceConnections: (database, choose) =>
      withConnection(adminUrl, false, async (c) => {
        const ids = await select<{ id: number | string }>(
          c,
          c.format('select ID as id from information_schema.PROCESSLIST where DB = ? and USER = ? and ID <> connection_id()', [
            database.name,
            user,
          ]),
        );
        let n = 0;
        for (const id of choose(ids.map((r) => Number(r.id)))) {
          try {
            await c.query(`KILL CONNECTION ${id}`);
            n++;
          } catch (error) {
            if ((error as { errno?: number }).errno !== UNKNOWN_THREAD) throw error;
          }
        }
        return n;
      }),
  };
}
