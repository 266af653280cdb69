/**
 * Peer: the idempotency library. Fastify + @aws-lambda-powertools/idempotency, keyed on the message
 * id, with its cache persistence layer over @redis/client (the idempotency record lives in Redis);
 * the work is one UPDATE through a pg Pool. 201 when the function ran, 200 when Powertools answered
 * from the record (a duplicate). Redis and PostgreSQL are two stores: not crash-atomic.
 */
import { IdempotencyAlreadyInProgressError, IdempotencyConfig, makeIdempotent } from '@aws-lambda-powertools/idempotency';
import { CachePersistenceLayer } from '@aws-lambda-powertools/idempotency/cache';
import { createClient } from '@redis/client';
import Fastify from 'fastify';
import pg from 'pg';
import { orderPlacedSchema, peerSettings, type OrderPlaced } from './schema.js';

const settings = peerSettings();
const redisUrl = process.env.REDIS_URL;
if (redisUrl === undefined) throw new Error('REDIS_URL is required');
const pool = new pg.Pool({ connectionString: settings.databaseUrl, max: settings.poolMax });
const redis = await createClient({ url: redisUrl }).connect();

const REPLAYED = Symbol('replayed');
type Reserved = { messageId: string; orderId: string; bookId: string; quantity: number };

const config = new IdempotencyConfig({
  eventKeyJmesPath: 'messageId',
  expiresAfterSeconds: 24 * 60 * 60,
  // Outside Lambda there is no invocation deadline: an in-progress record blocks copies for 10 s.
  // (The option's type, aws-lambda's Context, is not installed here; Powertools calls only this method.)
  lambdaContext: { getRemainingTimeInMillis: () => 10_000 },
  // Runs only when the answer comes from a stored record.
  responseHook: (response) => Object.assign(response as object, { [REPLAYED]: true }),
});

const reserveStock = makeIdempotent(
  async (message: OrderPlaced): Promise<Reserved> => {
    const { orderId, bookId, quantity } = message.data;
    const updated = await pool.query({
      name: 'reserve',
      text: 'UPDATE stock_items SET reserved = reserved + $1 WHERE book_id = $2',
      values: [quantity, bookId],
    });
    if (updated.rowCount === 0) throw new Error(`unknown book ${bookId}`);
    return { messageId: message.messageId, orderId, bookId, quantity };
  },
  { persistenceStore: new CachePersistenceLayer({ client: redis }), config },
);

const app = Fastify({ logger: false });
app.get('/health/ready', async () => ({ status: 'ok' }));

app.post<{ Body: OrderPlaced }>('/inventory/order-placed', { schema: { body: orderPlacedSchema } }, async (request, reply) => {
  try {
    const result = (await reserveStock(request.body)) as Reserved & { [REPLAYED]?: true };
    if (result[REPLAYED]) return reply.code(200).send({ status: 'duplicate', ...result });
    return reply.code(201).send({ status: 'reserved', ...result });
  } catch (error) {
    if (error instanceof IdempotencyAlreadyInProgressError)
      return reply.code(409).header('retry-after', '1').send({ error: 'in progress' });
    throw error;
  }
});

await app.listen({ port: settings.port, host: '127.0.0.1' });
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.once(
    signal,
    () =>
      void app
        .close()
        .then(() => Promise.all([pool.end(), redis.quit()]))
        .then(() => process.exit(0)),
  );
}
