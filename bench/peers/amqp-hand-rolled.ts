/**
 * Peer: a hand-rolled amqplib consumer. Prefetch 32 (AMQP_PREFETCH); per delivery one transaction
 * through a pg Pool (10):
 *   BEGIN; INSERT INTO inbox … ON CONFLICT DO NOTHING; UPDATE stock_items …; COMMIT   then ack
 *   the insert found the message id already there                               → COMMIT (nothing done), ack
 *   no such book                                                                → ROLLBACK, reject
 * A body that is not JSON or not the schema is rejected without requeue; any other failure is
 * requeued. Its inbox stamps received_at (now(): the transaction's start) and completed_at
 * (clock_timestamp() at the insert) by column defaults, so the runner reads its drain window from the
 * table as it does the service's. On SIGTERM it stops consuming, lets in-flight deliveries finish and
 * prints one JSON line: `{"amqpPeer": {processed, duplicates, rejected, requeued, firstDeliveryAt, lastCommitAt}}`.
 */
import { createServer } from 'node:http';
import { connect, type ConsumeMessage } from 'amqplib';
import { Ajv } from 'ajv';
import addFormats from 'ajv-formats';
import pg from 'pg';
import { orderPlacedSchema, peerSettings, type OrderPlaced } from './schema.js';

const settings = peerSettings();
const amqpUrl = process.env.AMQP_URL;
const queue = process.env.AMQP_QUEUE;
if (amqpUrl === undefined || queue === undefined) throw new Error('AMQP_URL and AMQP_QUEUE are required');
const prefetch = Number(process.env.AMQP_PREFETCH ?? 32);

const ajv = new Ajv();
addFormats.default(ajv);
const validate = ajv.compile<OrderPlaced>(orderPlacedSchema);

const pool = new pg.Pool({ connectionString: settings.databaseUrl, max: settings.poolMax });
const claim = { name: 'claim', text: "INSERT INTO inbox (message_id, consumer) VALUES ($1, 'inventory') ON CONFLICT DO NOTHING" };
const reserve = { name: 'reserve', text: 'UPDATE stock_items SET reserved = reserved + $1 WHERE book_id = $2' };

const counts = { processed: 0, duplicates: 0, rejected: 0, requeued: 0 };
let firstDeliveryAt: number | undefined;
let lastCommitAt: number | undefined;

/** One transaction: whether the message was new, a copy, or names no book. Throws to requeue. */
async function reserveOnce({ messageId, data }: OrderPlaced): Promise<'processed' | 'duplicates' | 'rejected'> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const claimed = await client.query({ ...claim, values: [messageId] });
    if (claimed.rowCount === 1) {
      const updated = await client.query({ ...reserve, values: [data.quantity, data.bookId] });
      if (updated.rowCount === 0) {
        await client.query('ROLLBACK');
        return 'rejected';
      }
    }
    await client.query('COMMIT');
    return claimed.rowCount === 1 ? 'processed' : 'duplicates';
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    client.release();
  }
}

const model = await connect(amqpUrl);
const channel = await model.createChannel();
await channel.prefetch(prefetch);
await channel.assertQueue(queue, { durable: true });
const inFlight = new Set<Promise<void>>();

async function handle(message: ConsumeMessage): Promise<void> {
  firstDeliveryAt ??= Date.now();
  let body: unknown;
  try {
    body = JSON.parse(message.content.toString('utf8'));
  } catch {
    body = undefined;
  }
  if (!validate(body)) {
    counts.rejected++;
    channel.reject(message, false);
    return;
  }
  try {
    const result = await reserveOnce(body);
    counts[result]++;
    if (result === 'rejected') return channel.reject(message, false);
    lastCommitAt = Date.now();
    channel.ack(message);
  } catch {
    counts.requeued++;
    channel.nack(message, false, true);
  }
}

const { consumerTag } = await channel.consume(
  queue,
  (message) => {
    if (message === null) return;
    const work = handle(message);
    inFlight.add(work);
    void work.finally(() => inFlight.delete(work));
  },
  { noAck: false },
);

const health = createServer((request, response) => {
  response.writeHead(request.url === '/health/ready' ? 200 : 404).end();
});
health.listen(settings.port, '127.0.0.1');

process.once('SIGTERM', () => {
  void (async () => {
    await channel.cancel(consumerTag);
    // Bounded: deliveries already held finish (each is one short transaction), then the counts go out.
    for (let i = 0; i < 100 && inFlight.size > 0; i++) await Promise.allSettled([...inFlight]);
    await channel.close();
    await model.close();
    await pool.end();
    health.close();
    console.log(JSON.stringify({ amqpPeer: { ...counts, firstDeliveryAt, lastCommitAt } }));
    process.exit(0);
  })();
});
