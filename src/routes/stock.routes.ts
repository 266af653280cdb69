import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type, type Static } from 'typebox';
import { retryOnceIfDeadlocked } from '../db/dialect.js';
import { findStockItem, listStockItems, setStock, type StockItem } from '../inventory/stock.repository.js';
import { adminGuard, adminSecurity } from '../http/admin-guard.js';
import { jsonBodyOnly } from '../http/body-parsers.js';
import { normalizeUuid, Uuid } from '../inbox/machinery.js';
import { EXAMPLE_BOOK_ID, stockExamples } from '../http/openapi-examples.js';
import { ADMIN_PROBLEMS, problemResponses, UNAVAILABLE_PROBLEMS, ProblemError } from '../http/problem.js';

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

/** The example book as the stock routes show it, after step 1 of the examples. */
const DUNE = { bookId: EXAMPLE_BOOK_ID, title: 'Dune', onHand: 10, reserved: 0, available: 10, updatedAt: '2026-11-30T12:00:00.000Z' };
function stockAnswer(description: string, summary: string) {
  return { description, content: { 'application/json': { schema: StockRef, examples: { dune: { summary, value: DUNE } } } } };
}

const BookParams = Type.Object(
  { bookId: { ...Uuid, description: 'The book (a uuid chosen by the catalogue)', examples: [EXAMPLE_BOOK_ID] } },
  { additionalProperties: false },
);
const SetStockBody = Type.Object(
  {
    title: Type.String({ minLength: 1, maxLength: 300, description: "The book's title" }),
    onHand: Type.Integer({ minimum: 0, maximum: 1_000_000_000, description: 'Copies in the warehouse, reserved ones included' }),
  },
  { additionalProperties: false, 'x-examples': stockExamples.body },
);
/** Items per page when the query names no limit (the validator fills it in). */
const PAGE_LIMIT = 100;

const StockPageQuery = Type.Object(
  {
    after: Type.Optional({ ...Uuid, description: 'nextAfter of the previous page; the first page when absent' }),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 500, default: PAGE_LIMIT, description: 'Items per page' })),
  },
  { additionalProperties: false },
);

function toStock(item: StockItem): Stock {
  return { ...item, updatedAt: item.updatedAt.toISOString() };
}

/** Stock figures; PUT writes absolute values, so repeating it is harmless and needs no inbox. */
export async function stockRoutes(app: FastifyInstance): Promise<void> {
  app.addSchema(Stock);
  registerGetStock(app);
  registerListStock(app);
  registerSetStock(app);
}

/** GET /stock/{bookId}: one book's stock. */
function registerGetStock(app: FastifyInstance): void {
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  api.get(
    '/stock/:bookId',
    {
      schema: {
        operationId: 'getStock',
        tags: ['stock'],
        summary: "A book's stock",
        security: [],
        params: BookParams,
        response: {
          200: stockAnswer("The book's stock", 'The example book after step 1'),
          ...problemResponses('invalid-request', 'not-found'),
        },
      },
    },
    async (request) => {
      const { bookId } = request.params;
      const item = await retryOnceIfDeadlocked(() => findStockItem(app.db, normalizeUuid(bookId)));
      if (item === undefined) throw new ProblemError('not-found', { detail: `no stock item for book ${bookId}` });
      return toStock(item);
    },
  );
}

/** GET /stock: all stock, keyset-paged by book id. */
function registerListStock(app: FastifyInstance): void {
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  api.get(
    '/stock',
    {
      schema: {
        operationId: 'listStock',
        tags: ['stock'],
        summary: 'All stock, ordered by book id (keyset-paged)',
        security: [],
        querystring: StockPageQuery,
        response: {
          200: {
            description: 'One page of stock; nextAfter is the after of the next page, null on the last',
            content: {
              'application/json': {
                schema: Type.Object(
                  { items: Type.Array(StockRef), nextAfter: Type.Union([Uuid, Type.Null()]) },
                  { additionalProperties: false },
                ),
                examples: { dune: { summary: 'After step 1: the example book, one page', value: { items: [DUNE], nextAfter: null } } },
              },
            },
          },
          ...problemResponses('invalid-request'),
        },
      },
    },
    async (request) => {
      const { after, limit = PAGE_LIMIT } = request.query;
      const page = await retryOnceIfDeadlocked(() =>
        listStockItems(app.db, { after: after === undefined ? undefined : normalizeUuid(after), limit }),
      );
      return { items: page.items.map(toStock), nextAfter: page.nextAfter };
    },
  );
}

/** PUT /stock/{bookId} (admin): a book's title and on-hand count, as absolute values. */
function registerSetStock(app: FastifyInstance): void {
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  api.put(
    '/stock/:bookId',
    {
      onRequest: [adminGuard(app.config), jsonBodyOnly],
      schema: {
        operationId: 'setStock',
        tags: ['stock'],
        description:
          "Step 1 of the examples: set the example book (Dune, 10 copies) before sending the commands' examples, " +
          'whose orders are all for that book. 201 when the book is new, 200 when it was updated.',
        summary: "Set a book's title and on-hand count (admin; absolute values, naturally idempotent)",
        security: adminSecurity,
        params: BookParams,
        body: SetStockBody,
        response: {
          200: stockAnswer('Updated', 'The example book, set again'),
          201: stockAnswer('Created', 'The example book, created by step 1'),
          ...problemResponses(
            'invalid-request',
            'malformed-json',
            ...ADMIN_PROBLEMS,
            'stock-below-reserved',
            'payload-too-large',
            'unsupported-media-type',
            ...UNAVAILABLE_PROBLEMS,
          ),
        },
      },
    },
    async (request, reply) => {
      const { bookId } = request.params;
      const { body } = request;
      // Absolute values: running it again after a deadlock rolled it back is the same request.
      const result = await retryOnceIfDeadlocked(() =>
        setStock(app.db, { bookId: normalizeUuid(bookId), title: body.title, onHand: body.onHand }, app.now()),
      );
      if (result.kind === 'below-reserved') {
        throw new ProblemError('stock-below-reserved', {
          detail: `${result.reserved} copies are reserved; onHand cannot be ${body.onHand}`,
        });
      }
      return reply.code(result.kind === 'created' ? 201 : 200).send(toStock(result.item));
    },
  );
}
