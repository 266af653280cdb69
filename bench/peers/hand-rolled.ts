/**
 * Peer: the hand-rolled inbox. Fastify + a pg Pool; per message one transaction that inserts the
 * message id into its own inbox table and reserves the stock:
 *   BEGIN; INSERT INTO inbox …; UPDATE stock_items …; COMMIT   → 201
 *   the insert hits the primary key (23505)                   → ROLLBACK, 200
 * Named statements (prepared once per connection); no outcome stored, no payload fingerprint.
 */
import Fastify from 'fastify';
import pg from 'pg';
import { orderPlacedSchema, peerSettings, type OrderPlaced } from './schema.js';

const settings = peerSettings();
const pool = new pg.Pool({ connectionString: settings.databaseUrl, max: settings.poolMax });
const claim = { name: 'claim', text: "INSERT INTO inbox (message_id, consumer, received_at) VALUES ($1, 'inventory', now())" };
const reserve = { name: 'reserve', text: 'UPDATE stock_items SET reserved = reserved + $1 WHERE book_id = $2' };

const app = Fastify({ logger: false });
app.get('/health/ready', async () => ({ status: 'ok' }));

app.post<{ Body: OrderPlaced }>('/inventory/order-placed', { schema: { body: orderPlacedSchema } }, async (request, reply) => {
  const { messageId, data } = request.body;
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    try {
      await client.query({ ...claim, values: [messageId] });
    } catch (error) {
      await client.query('ROLLBACK');
      if ((error as { code?: string }).code === '23505') return reply.code(200).send({ status: 'duplicate', messageId });
      throw error;
    }
    const updated = await client.query({ ...reserve, values: [data.quantity, data.bookId] });
    if (updated.rowCount === 0) {
      await client.query('ROLLBACK');
      return reply.code(404).send({ error: 'unknown book' });
    }
    await client.query('COMMIT');
    return reply.code(201).send({ status: 'reserved', messageId, ...data });
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    client.release();
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
