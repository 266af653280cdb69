import { randomUUID } from 'node:crypto';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { sql } from 'kysely';
import { buildApp, type BuildAppOptions } from '../../src/app.js';
import type { Db } from '../../src/schema/database.js';
import type { ProblemDetails } from '../../src/http/problem.js';
import type { Stock } from '../../src/routes/stock.routes.js';
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
/**
 * Holds a lock on a book's stock row in a transaction of its own until `release()` is called; resolves
 * once the lock is taken. `done` settles when that transaction has ended.
 */
export async function holdStockRow(db: Db, bookId: string): Promise<{ release: () => void; done: Promise<void> }> {
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let locked!: () => void;
  const isLocked = new Promise<void>((resolve) => (locked = resolve));
  const done = db.transaction().execute(async (trx) => {
    await trx.selectFrom('stock_items').select('book_id').where('book_id', '=', bookId).forUpdate().execute();
    locked();
    await released;
  });
  await Promise.race([isLocked, done]);
  return { release, done };
}

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
  for (const table of ['stock_items', 'stock_reservations', 'order_cancellations', 'inbox', 'dead_letters', 'outbox'] as const) {
    const row = await db
      .selectFrom(table)
      .select(sql<number>`count(*)`.as('n'))
      .executeTakeFirstOrThrow();
    counts[table] = Number(row.n);
  }
  return counts;
}

/**
 * Parses a response body as the T the test expects. JSON.parse checks nothing: T only names the
 * fields a test reads (the types below), and the test's assertions check their values.
 */
export function json<T>(res: LightMyRequestResponse): T {
  return JSON.parse(res.body) as T;
}

// The response bodies the tests read, as the route schemas in src/routes describe them.

export type Problem = ProblemDetails;

export type { Stock };

/**
 * A command's outcome, every variant in one: `result` says which variant it is, and the other
 * fields are there or not according to it (see the outcome schemas of the command routes).
 */
export interface Outcome {
  result: string;
  orderId?: string;
  bookId?: string;
  quantity?: number;
  available?: number;
  cancelledBy?: string;
  existing?: { quantity: number; reservedBy: string; released: boolean };
  released?: { bookId: string; quantity: number }[];
  downstreamKey?: string;
  providerMessageId?: string | null;
  reconciled?: 'automatic' | null;
  attempts?: number;
  resolution?: string;
  note?: string | null;
}

/** What a command route answers (201 processed, 200 a replay). */
export interface CommandAnswer {
  status: 'processed' | 'duplicate';
  consumer: string;
  messageId: string;
  keySource: string;
  receivedAt: string;
  processedAt: string;
  outcome: Outcome;
}

export interface InboxRecord {
  consumer: string;
  messageId: string;
  state: 'in-progress' | 'completed';
  keySource: string;
  fingerprint: string;
  attempts: number;
  outcome: Outcome | null;
  links: { self: string; reconcile: string };
}

export interface DeadLetter {
  id: string;
  consumer: string;
  messageId: string;
  keySource: string;
  payload: unknown;
  storedFingerprint: string;
  receivedFingerprint: string;
  reason: string;
  detail: string | null;
}

export interface OutboxEvent {
  id: string;
  type: string;
  consumer: string;
  causationId: string;
  data: unknown;
  attempts: number;
  lastError: string | null;
}

/** A page of an admin list. */
export interface Page<T> {
  items: T[];
  nextAfter: string | null;
}

/** What POST /inbox/prune answers: rows deleted per table. */
export interface Pruned {
  inbox: number;
  deadLetters: number;
  outbox: number;
  complete: boolean;
}
