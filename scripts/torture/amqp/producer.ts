/** The AMQP mode's workload: orders, the copies of each a producer publishes at least once, and publishing them with confirms. */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { violation } from '../log.js';
import type { AmqpPlan } from '../plan.js';
import { between, type Rng } from '../random.js';
import { amqpStats } from '../report.js';
import type { ClientConnection } from './broker.js';

export const ORDER_QUEUE = 'inventory.order-placed';

export interface Order {
  orderId: string;
  bookId: string;
  quantity: number;
  /** Message ids this order was sent under (a producer duplicate adds a second one). */
  messageIds: string[];
}

/** One publish of an order under one of its message ids, due at `at`. */
export interface Copy {
  order: Order;
  messageId: string;
  at: number;
}

function messageIdOf(order: Order): string {
  const id = order.messageIds[0];
  if (id === undefined) throw new Error(`order ${order.orderId} has no message id`);
  return id;
}

export function planOrders(plan: AmqpPlan, books: readonly string[], rng: Rng): Order[] {
  return Array.from({ length: plan.orders }, () => {
    const orderId = randomUUID();
    const bookId = books[Math.floor(rng() * books.length)];
    if (bookId === undefined) throw new Error('no books to order');
    return { orderId, bookId, quantity: between(rng, 1, 3), messageIds: [`order-${randomUUID()}`] };
  });
}

/**
 * Each order once, many twice or three times (same message id), a few again under a new message id;
 * copies are spread out, so some arrive long after the first was processed. Sorted by due time.
 */
export function planCopies(orders: Order[], rng: Rng, trafficStart: number, trafficMs: number): Copy[] {
  const trafficEnd = trafficStart + trafficMs;
  const copies: Copy[] = [];
  for (const [i, order] of orders.entries()) {
    const at = trafficStart + (i / orders.length) * (trafficMs - 3000);
    copies.push({ order, messageId: messageIdOf(order), at });
    const repeats = rng() < 0.5 ? between(rng, 1, 2) : 0;
    for (let r = 0; r < repeats; r++) {
      copies.push({ order, messageId: messageIdOf(order), at: Math.min(trafficEnd - 1000, at + rng() * 5000) });
      amqpStats.duplicatePublishes++;
    }
    if (rng() < 0.1) {
      const other = `order-${randomUUID()}`;
      order.messageIds.push(other);
      copies.push({ order, messageId: other, at: Math.min(trafficEnd - 1000, at + rng() * 5000) });
      amqpStats.producerDuplicates++;
    }
  }
  return copies.sort((a, b) => a.at - b.at);
}

/** Publishes one message until the broker confirms it (at least once), bounded by the deadline. */
async function publishConfirmed(connection: ClientConnection, order: Order, messageId: string, deadline: number): Promise<void> {
  const body = Buffer.from(JSON.stringify({ messageId, data: { orderId: order.orderId, bookId: order.bookId, quantity: order.quantity } }));
  for (let attempt = 1; Date.now() < deadline; attempt++) {
    try {
      const channel = await connection.ensure(deadline);
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('no confirm')), 5000);
        channel.sendToQueue(ORDER_QUEUE, body, { persistent: true, contentType: 'application/json', messageId }, (error: unknown) => {
          clearTimeout(timer);
          if (error) reject(error instanceof Error ? error : new Error('publish not confirmed', { cause: error }));
          else resolve();
        });
      });
      amqpStats.publishes++;
      return;
    } catch {
      amqpStats.publishRetries++;
      await sleep(Math.min(2000, 100 * attempt));
    }
  }
  violation('producer', `order ${order.orderId} message ${messageId} was never confirmed by the broker`);
}

/** Publishes every copy when it is due, in 8 lanes. */
export async function publishAll(connection: ClientConnection, copies: readonly Copy[], deadline: number): Promise<void> {
  const lanes = 8;
  await Promise.all(
    Array.from({ length: lanes }, async (_, lane) => {
      for (let i = lane; i < copies.length; i += lanes) {
        const copy = copies[i];
        if (copy === undefined) continue;
        await sleep(Math.max(0, copy.at - Date.now()));
        await publishConfirmed(connection, copy.order, copy.messageId, deadline);
      }
    }),
  );
}
