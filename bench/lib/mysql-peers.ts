import { randomBytes } from 'node:crypto';
import { connectMysql } from './mysql.js';
import { BOOKS, bookId, ON_HAND } from './postgres.js';

/**
 * The hand-rolled peer's database on MariaDB/MySQL (bench/peers/hand-rolled-mysql.ts): the same two
 * tables as on PostgreSQL (bench/lib/peers.ts), in MySQL types, seeded with the same book ids.
 */

/** The peer's tables: uuids as ASCII text compared byte for byte, instants as UTC DATETIME(6). */
export const MYSQL_PEER_SCHEMA = [
  `CREATE TABLE stock_items (
     book_id char(36) CHARACTER SET ascii COLLATE ascii_bin PRIMARY KEY,
     title varchar(300) NOT NULL,
     on_hand bigint NOT NULL,
     reserved bigint NOT NULL
   ) ENGINE=InnoDB`,
  `CREATE TABLE inbox (
     message_id varchar(200) NOT NULL,
     consumer varchar(100) NOT NULL,
     received_at datetime(6) NOT NULL,
     PRIMARY KEY (message_id, consumer)
   ) ENGINE=InnoDB`,
];

/** Rows per seeding INSERT: well under max_allowed_packet. */
const SEED_BATCH = 1000;

/** A fresh peers' database on the server adminUrl names: the tables, and BOOKS books with ON_HAND each. */
export async function createMysqlPeersDatabase(adminUrl: string, name = `bench_peers_${randomBytes(4).toString('hex')}`) {
  const admin = await connectMysql(adminUrl, undefined);
  try {
    await admin.query(`CREATE DATABASE \`${name}\` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin`);
  } finally {
    await admin.end();
  }
  const url = new URL(adminUrl.replace(/^mariadb:/, 'mysql:'));
  url.pathname = `/${name}`;
  const c = await connectMysql(url.toString(), name);
  try {
    for (const statement of MYSQL_PEER_SCHEMA) await c.query(statement);
    for (let first = 1; first <= BOOKS; first += SEED_BATCH) {
      const rows: [string, string, number, number][] = [];
      for (let n = first; n < Math.min(first + SEED_BATCH, BOOKS + 1); n++) rows.push([bookId(n), `Book ${n}`, ON_HAND, 0]);
      await c.query('INSERT INTO stock_items (book_id, title, on_hand, reserved) VALUES ?', [rows]);
    }
    await c.query('ANALYZE TABLE stock_items');
  } finally {
    await c.end();
  }
  return {
    url: url.toString(),
    async drop() {
      const dropper = await connectMysql(adminUrl, undefined);
      try {
        await dropper.query(`DROP DATABASE IF EXISTS \`${name}\``);
      } finally {
        await dropper.end();
      }
    },
  };
}
