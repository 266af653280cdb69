/**
 * A walkthrough of the AMQP side, no curl needed: with the service running with AMQP_URL set,
 *
 *   npx tsx scripts/amqp-demo.ts
 *
 * binds a temporary queue to the events exchange, stocks a new book through the admin API, publishes an
 * OrderPlaced twice (same messageId), an OrderPlaced that asks for too much, and an OrderCancelled to the
 * command queues, and prints every event that comes out. Expect three: stock-reserved (once, though
 * the order was sent twice), reservation-refused, stock-released.
 *
 * Environment: AMQP_URL (amqp://guest:guest@127.0.0.1:5672), SERVICE_URL (http://127.0.0.1:3000),
 * ADMIN_TOKEN (when the service has one), AMQP_EXCHANGE and the queue names if changed from the defaults.
 */
import { randomUUID } from 'node:crypto';
import { inspect } from 'node:util';
import { connect } from 'amqplib';

const amqpUrl = process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const serviceUrl = process.env.SERVICE_URL ?? 'http://127.0.0.1:3000';
const exchange = process.env.AMQP_EXCHANGE ?? 'inventory.events';
const placedQueue = process.env.AMQP_ORDER_PLACED_QUEUE ?? 'inventory.order-placed';
const cancelledQueue = process.env.AMQP_ORDER_CANCELLED_QUEUE ?? 'inventory.order-cancelled';
const adminToken = process.env.ADMIN_TOKEN;

const model = await connect(amqpUrl);
const channel = await model.createConfirmChannel();
await channel.assertExchange(exchange, 'topic', { durable: true });
const { queue: tap } = await channel.assertQueue('', { exclusive: true, autoDelete: true });
await channel.bindQueue(tap, exchange, '#');

const bookId = randomUUID();
const stocked = await fetch(`${serviceUrl}/stock/${bookId}`, {
  method: 'PUT',
  headers: { 'content-type': 'application/json', ...(adminToken ? { authorization: `Bearer ${adminToken}` } : {}) },
  body: JSON.stringify({ title: 'Dune', onHand: 5 }),
});
console.log(`PUT /stock/${bookId} -> ${stocked.status} (5 on hand)`);

const orderId = randomUUID();
const placed = { messageId: `demo-${randomUUID()}`, data: { orderId, bookId, quantity: 2 } };
const tooMuch = { messageId: `demo-${randomUUID()}`, data: { orderId: randomUUID(), bookId, quantity: 50 } };
const cancelled = { messageId: `demo-${randomUUID()}`, data: { orderId } };
const send = (queue: string, message: unknown) =>
  new Promise<void>((resolve, reject) =>
    channel.sendToQueue(
      queue,
      Buffer.from(JSON.stringify(message)),
      { persistent: true, contentType: 'application/json' },
      (error: unknown) => (error ? reject(error instanceof Error ? error : new Error(inspect(error))) : resolve()),
    ),
  );
await send(placedQueue, placed);
await send(placedQueue, placed);
console.log(`published OrderPlaced ${placed.messageId} twice to ${placedQueue}`);
await send(placedQueue, tooMuch);
console.log(`published OrderPlaced ${tooMuch.messageId} (quantity 50) to ${placedQueue}`);
// After the reservation, so the cancellation finds it.
await new Promise((r) => setTimeout(r, 1000));
await send(cancelledQueue, cancelled);
console.log(`published OrderCancelled ${cancelled.messageId} to ${cancelledQueue}\n`);

let seen = 0;
await channel.consume(tap, (message) => {
  if (message === null) return;
  seen++;
  console.log(`event ${message.fields.routingKey}  message-id ${message.properties.messageId}`);
  console.log(`${JSON.stringify(JSON.parse(message.content.toString()), null, 2)}\n`);
  channel.ack(message);
});
const deadline = Date.now() + 10_000;
while (seen < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
console.log(seen === 3 ? 'three events, as expected' : `${seen} events within 10 s (is the service running with AMQP_URL set?)`);
await model.close();
