import type { FastifyInstance } from 'fastify';
import { Type, type Static } from 'typebox';
import { retryOnceIfDeadlocked } from '../db/dialect.js';
import { findStockItem, listStockItems, normalizeUuid, setStock, type StockItem } from '../inventory/stock.repository.js';
import { adminGuard, adminSecurity } from './admin-guard.js';
import { jsonBodyOnly } from './body-parsers.js';
import { Uuid } from './command-schemas.js';
import { problemResponses, ProblemError } from './problem.js';

export const Stock = Type.Object(
  {
    bookId: Uuid,
    title: Type.String(),
    onHand: Type.Integer(),
    reserved: Type.Integer(),
    available: Type.Integer({ description: 'onHand - reserved' }),
    updatedAt: Type.String({ format: 'date-time' }),
  },
  { $id: 'Stock', additionalProperties: false },
);
export type Stock = Static<typeof Stock>;
const StockRef = Type.Ref('Stock');

const BookParams = Type.Object({ bookId: Uuid }, { additionalProperties: false });
const SetStockBody = Type.Object(
  { title: Type.String({ minLength: 1, maxLength: 300 }), onHand: Type.Integer({ minimum: 0, maximum: 1_000_000_000 }) },
  { additionalProperties: false },
);
const StockPageQuery = Type.Object(
  { after: Type.Optional(Uuid), limit: Type.Integer({ minimum: 1, maximum: 500, default: 100 }) },
  { additionalProperties: false },
);

function toStock(item: StockItem): Stock {
  return { ...item, updatedAt: item.updatedAt.toISOString() };
}

/** Stock figures; PUT writes absolute values, so repeating it is harmless and needs no inbox. */
export async function stockRoutes(app: FastifyInstance): Promise<void> {
  app.addSchema(Stock);

  app.get(
    '/stock/:bookId',
    {
      schema: { tags: ['stock'], summary: "A book's stock", params: BookParams, response: { 200: StockRef, ...problemResponses(400, 404) } },
    },
    async (request) => {
      const { bookId } = request.params as Static<typeof BookParams>;
      const item = await retryOnceIfDeadlocked(() => findStockItem(app.db, normalizeUuid(bookId)));
      if (item === undefined) throw new ProblemError('not-found', { detail: `no stock item for book ${bookId}` });
      return toStock(item);
    },
  );

  app.get(
    '/stock',
    {
      schema: {
        tags: ['stock'],
        summary: 'All stock, ordered by book id (keyset-paged)',
        querystring: StockPageQuery,
        response: {
          200: Type.Object({ items: Type.Array(StockRef), nextAfter: Type.Union([Uuid, Type.Null()]) }, { additionalProperties: false }),
          ...problemResponses(400),
        },
      },
    },
    async (request) => {
      const { after, limit } = request.query as Static<typeof StockPageQuery>;
      const page = await retryOnceIfDeadlocked(() => listStockItems(app.db, { after: after === undefined ? undefined : normalizeUuid(after), limit }));
      return { items: page.items.map(toStock), nextAfter: page.nextAfter };
    },
  );

  app.put(
    '/stock/:bookId',
    {
      onRequest: [adminGuard(app.config.adminToken), jsonBodyOnly],
      schema: {
        tags: ['stock'],
        summary: "Set a book's title and on-hand count (admin; absolute values, naturally idempotent)",
        security: adminSecurity,
        params: BookParams,
        body: SetStockBody,
        response: {
          200: { ...StockRef, description: 'Updated' },
          201: { ...StockRef, description: 'Created' },
          ...problemResponses(400, 401, 403, 409, 413, 415),
        },
      },
    },
    async (request, reply) => {
      const { bookId } = request.params as Static<typeof BookParams>;
      const body = request.body as Static<typeof SetStockBody>;
      // Absolute values: running it again after a deadlock rolled it back is the same request.
      const result = await retryOnceIfDeadlocked(() => setStock(app.db, { bookId: normalizeUuid(bookId), title: body.title, onHand: body.onHand }, app.now()));
      if (result.kind === 'below-reserved') {
        throw new ProblemError('stock-below-reserved', { detail: `${result.reserved} copies are reserved; onHand cannot be ${body.onHand}` });
      }
      return reply.code(result.kind === 'created' ? 201 : 200).send(toStock(result.item));
    },
  );
}
