/**
 * Peer: the hand-rolled inbox on MariaDB/MySQL. Fastify + a mysql2 pool; per message one transaction
 * that inserts the message id into its own inbox table and reserves the stock, as hand-rolled.ts does
 * on PostgreSQL:
 *   START TRANSACTION; INSERT INTO inbox …; UPDATE stock_items …; COMMIT   → 201
 *   the insert hits the primary key (1062, ER_DUP_ENTRY)                  → ROLLBACK, 200
 * Prepared statements (execute: prepared once per connection); no outcome stored, no payload
 * fingerprint. Its tables: bench/lib/mysql-peers.ts. DATABASE_URL: mysql://user:pass@host:3306/db.
 */
import Fastify from 'fastify';
import { createPool, type PoolConnection } from 'mysql2/promise';
import { orderPlacedSchema, peerSettings, type OrderPlaced } from './schema.js';

const settings = peerSettings();
const url = new URL(settings.databaseUrl.replace(/^mariadb:/, 'mysql:'));
const socketPath = url.searchParams.get('socketPath');
const pool = createPool({
  ...(socketPath === null ? { host: url.hostname, port: url.port === '' ? 3306 : Number(url.port) } : { socketPath }),
  user: decodeURIComponent(url.username) || 'root',
  password: decodeURIComponent(url.password),
  database: decodeURIComponent(url.pathname.slice(1)),
  connectionLimit: settings.poolMax,
  timezone: 'Z',
});
// READ COMMITTED, as a developer on MySQL would set it: REPEATABLE READ's gap locks on the inbox's
// key range deadlock concurrent inserts of neighbouring keys.
pool.pool.on('connection', (connection) => {
  connection.query('SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED');
});
const claim = "INSERT INTO inbox (message_id, consumer, received_at) VALUES (?, 'inventory', UTC_TIMESTAMP(6))";
const reserve = 'UPDATE stock_items SET reserved = reserved + ? WHERE book_id = ?';

const ER_DUP_ENTRY = 1062;

interface ChangeResult {
  affectedRows: number;
}

const app = Fastify({ logger: false });
app.get('/health/ready', async () => ({ status: 'ok' }));

app.post<{ Body: OrderPlaced }>('/inventory/order-placed', { schema: { body: orderPlacedSchema } }, async (request, reply) => {
  const { messageId, data } = request.body;
  const connection: PoolConnection = await pool.getConnection();
  try {
    await connection.query('START TRANSACTION');
    try {
      await connection.execute(claim, [messageId]);
    } catch (error) {
      await connection.query('ROLLBACK');
      if ((error as { errno?: number }).errno === ER_DUP_ENTRY) return reply.code(200).send({ status: 'duplicate', messageId });
      throw error;
    }
    const [updated] = await connection.execute(reserve, [data.quantity, data.bookId]);
    if ((updated as ChangeResult).affectedRows === 0) {
      await connection.query('ROLLBACK');
      return reply.code(404).send({ error: 'unknown book' });
    }
    await connection.query('COMMIT');
    return reply.code(201).send({ status: 'reserved', messageId, ...data });
  } catch (error) {
    await connection.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    connection.release();
  }
});

await app.listen({ port: settings.port, host: '127.0.0.1' });
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.once(
    signal,
    () =>
      void app
        .close()
        .then(() => pool.end())
        .then(() => process.exit(0)),
  );
}
