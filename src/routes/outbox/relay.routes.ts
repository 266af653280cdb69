import { hostname } from 'node:os';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { pendingByBook, type PendingBook } from '../../admin/console.repository.js';
import { adminGuard, adminSecurity } from '../../http/admin-guard.js';
import { ADMIN_PROBLEMS, problemResponses } from '../../http/problem.js';
import { type AdminGuard, LimitQuery } from '../route-options.js';
import { PendingBookSchema, RelaySchema } from './relay.schemas.js';

/**
 * Admin: the outbox as the relay sees it, by book (a book publishes in order, so its oldest event holds
 * the others back), and the relay of the replica that answers.
 */

const STARTED_AT = new Date();

function replica() {
  return { id: `${hostname()}:${process.pid}`, hostname: hostname(), pid: process.pid, startedAt: STARTED_AT.toISOString() };
}

function bookToApi(book: PendingBook) {
  return {
    bookId: book.bookId,
    pending: book.pending,
    heldBehind: Math.max(0, book.pending - 1),
    oldestOccurredAt: book.oldestOccurredAt?.toISOString() ?? null,
    head: book.head === null ? null : { ...book.head, lastAttemptAt: book.head.lastAttemptAt?.toISOString() ?? null },
  };
}

/** The outbox relay of this replica as the API shows it. */
export function relayState(app: FastifyInstance) {
  const relay = app.messaging.relay;
  const state = relay?.state;
  return {
    replica: replica(),
    configured: relay !== undefined,
    running: state?.running ?? false,
    connected: app.messaging.publisher?.ready ?? false,
    consecutiveFailures: state?.consecutiveFailures ?? 0,
    lastPublishedAt: state?.lastPublishedAt?.toISOString() ?? null,
    lastFailureAt: state?.lastFailureAt?.toISOString() ?? null,
    lastError: state?.lastError ?? null,
  };
}

/** Admin: pending events by book, and this replica's relay. */
export async function relayRoutes(app: FastifyInstance): Promise<void> {
  const onRequest = adminGuard(app.config);
  registerPendingOutboxByBook(app, onRequest);
  registerRelayState(app, onRequest);
}

/** GET /outbox/books: pending events by book. */
function registerPendingOutboxByBook(app: FastifyInstance, onRequest: AdminGuard): void {
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  api.get(
    '/outbox/books',
    {
      onRequest,
      schema: {
        operationId: 'listPendingOutboxByBook',
        tags: ['outbox'],
        summary: 'Pending events by book: how many, and the oldest one, which the others are held behind',
        description:
          "A book's events are published in order, so a book whose oldest event keeps failing (head.lastError) holds back " +
          'every later event of that book (heldBehind). Books with the oldest pending event first.',
        security: adminSecurity,
        querystring: LimitQuery,
        response: {
          200: Type.Object(
            { items: Type.Array(PendingBookSchema) },
            { additionalProperties: false, description: 'Pending events by book' },
          ),
          ...problemResponses('invalid-request', ...ADMIN_PROBLEMS),
        },
      },
    },
    async (request) => {
      const books = await pendingByBook(app.db, request.query.limit ?? 100);
      return { items: books.map(bookToApi) };
    },
  );
}

/** GET /outbox/relay: this replica's outbox relay. */
function registerRelayState(app: FastifyInstance, onRequest: AdminGuard): void {
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  api.get(
    '/outbox/relay',
    {
      onRequest,
      schema: {
        operationId: 'getRelayState',
        tags: ['outbox'],
        summary: 'The outbox relay of the replica that answers: running, connected, recent failures',
        description: 'Every replica runs a relay and answers for its own; ask each replica (replica.id says which one answered).',
        security: adminSecurity,
        response: { 200: { ...RelaySchema, description: "This replica's relay" }, ...problemResponses(...ADMIN_PROBLEMS) },
      },
    },
    async () => relayState(app),
  );
}
