import { randomUUID } from 'node:crypto';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { sql } from 'kysely';
import { buildApp, type BuildAppOptions } from '../../src/app.js';
import type { Db } from '../../src/db/database.js';
import type { TestDatabaseHandle } from './databases.js';

export const ADMIN_TOKEN = 'test-admin-token-0123456789';

/** buildApp on a test database, quiet, with an admin token. */
export async function testApp(database: TestDatabaseHandle, options: Omit<BuildAppOptions, 'database'> = {}): Promise<FastifyInstance> {
  const app = await buildApp({
    logger: false,
    ...options,
    database,
    config: { adminToken: ADMIN_TOKEN, webhookSecret: undefined, ...options.config },
  });
  await app.ready();
  return app;
}

export const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };

export function newId(): string {
  return randomUUID();
}

/** Creates or sets a book's stock through the API, as an operator would. */
export async function seedBook(app: FastifyInstance, onHand: number, bookId = newId(), title = 'Dune'): Promise<string> {
  const res = await app.inject({ method: 'PUT', url: `/stock/${bookId}`, headers: admin, payload: { title, onHand } });
  if (res.statusCode !== 201 && res.statusCode !== 200) throw new Error(`seeding failed: ${res.statusCode} ${res.body}`);
  return bookId;
}

export interface OrderPlaced {
  messageId: string;
  data: { orderId: string; bookId: string; quantity: number };
}

export function orderPlaced(bookId: string, quantity = 2, messageId = `msg-${newId()}`, orderId = newId()): OrderPlaced {
  return { messageId, data: { orderId, bookId, quantity } };
}

export function placeOrder(app: FastifyInstance, message: unknown, headers: Record<string, string> = {}): Promise<LightMyRequestResponse> {
  return app.inject({ method: 'POST', url: '/inventory/order-placed', payload: message as object, headers });
}

export function cancelOrder(app: FastifyInstance, message: unknown, headers: Record<string, string> = {}): Promise<LightMyRequestResponse> {
  return app.inject({ method: 'POST', url: '/inventory/order-cancelled', payload: message as object, headers });
}

/** The stock figures straight from the database, not through the API under test. */
export async function stockRow(db: Db, bookId: string): Promise<{ on_hand: number; reserved: number } | undefined> {
  return db.selectFrom('stock_items').select(['on_hand', 'reserved']).where('book_id', '=', bookId).executeTakeFirst();
}

export async function reservedOf(db: Db, bookId: string): Promise<number> {
  const row = await stockRow(db, bookId);
  if (row === undefined) throw new Error(`no stock row for ${bookId}`);
  return row.reserved;
}

export async function inboxRows(db: Db, messageId?: string) {
  let q = db.selectFrom('inbox').selectAll().orderBy('consumer');
  if (messageId !== undefined) q = q.where('message_id', '=', messageId);
  return q.execute();
}

/** Row counts of every table: "nothing was written" is asserted with these. */
export async function tableCounts(db: Db): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  for (const table of ['stock_items', 'stock_reservations', 'inbox', 'dead_letters', 'outbox'] as const) {
    const row = await db.selectFrom(table).select(sql<number>`count(*)`.as('n')).executeTakeFirstOrThrow();
    counts[table] = Number(row.n);
  }
  return counts;
}

export function json(res: LightMyRequestResponse): any {
  return JSON.parse(res.body);
}
