import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { normalizeUuid, releaseStock, reserveStock, reserveStockBatch } from '../inventory/stock.repository.js';
import { Uuid } from './command-schemas.js';
import { registerCommand } from './command-route.js';
import { EXAMPLE_BOOK_ID, EXAMPLE_ORDERS, orderCancelledExamples, orderPlacedExamples } from './examples.js';

export const RESERVE_STOCK = 'inventory.reserve-stock';
export const RELEASE_STOCK = 'inventory.release-stock';

const OrderPlacedData = Type.Object(
  { orderId: Uuid, bookId: Uuid, quantity: Type.Integer({ minimum: 1, maximum: 1000 }) },
  { additionalProperties: false },
);
interface OrderPlacedData {
  orderId: string;
  bookId: string;
  quantity: number;
}

const OrderCancelledData = Type.Object(
  { orderId: Uuid, bookId: Type.Optional({ ...Uuid, description: 'release only this book; all of the order when absent' }) },
  { additionalProperties: false },
);
interface OrderCancelledData {
  orderId: string;
  bookId?: string;
}

const common = { orderId: Uuid, bookId: Uuid, quantity: Type.Integer() };
const ReserveOutcome = Type.Union([
  Type.Object({ result: Type.Literal('reserved'), ...common }, { additionalProperties: false }),
  Type.Object({ result: Type.Literal('insufficient-stock'), ...common, available: Type.Integer() }, { additionalProperties: false }),
  Type.Object({ result: Type.Literal('unknown-book'), ...common }, { additionalProperties: false }),
  Type.Object(
    {
      result: Type.Literal('already-reserved'),
      ...common,
      existing: Type.Object(
        { quantity: Type.Integer(), reservedBy: Type.String(), released: Type.Boolean() },
        { additionalProperties: false, description: 'the reservation this order already has for this book' },
      ),
    },
    { additionalProperties: false },
  ),
]);

const ReleaseOutcome = Type.Union([
  Type.Object(
    {
      result: Type.Literal('released'),
      orderId: Uuid,
      released: Type.Array(Type.Object({ bookId: Uuid, quantity: Type.Integer() }, { additionalProperties: false })),
    },
    { additionalProperties: false },
  ),
  Type.Object({ result: Type.Literal('not-reserved'), orderId: Uuid }, { additionalProperties: false }),
]);

/** The inventory commands: reserve stock for a placed order, release it for a cancelled one. */
export async function inventoryRoutes(app: FastifyInstance): Promise<void> {
  registerCommand<OrderPlacedData, unknown>(app, {
    url: '/inventory/order-placed',
    consumer: RESERVE_STOCK,
    name: 'OrderPlaced',
    operationId: 'orderPlaced',
    examples: {
      ...orderPlacedExamples,
      result: {
        consumer: RESERVE_STOCK,
        messageId: 'order-1001-placed',
        outcome: { result: 'reserved', orderId: EXAMPLE_ORDERS.envelope, bookId: EXAMPLE_BOOK_ID, quantity: 2 },
      },
    },
    summary: 'Reserve stock for a placed order (exactly once per message)',
    description:
      'Consumer inventory.reserve-stock. Reserves quantity of bookId for orderId when enough is available. ' +
      'A refusal (insufficient-stock, unknown-book, already-reserved) is still a processed message: 201, recorded and replayed.',
    data: OrderPlacedData,
    outcome: ReserveOutcome,
    normalize: (d) => ({ orderId: normalizeUuid(d.orderId), bookId: normalizeUuid(d.bookId), quantity: d.quantity }),
    run: (trx, { data, key }, now) => reserveStock(trx, { ...data, messageId: key.messageId }, now),
    runBatch: (trx, items, now) => reserveStockBatch(trx, items.map(({ data, key }) => ({ ...data, messageId: key.messageId })), now),
  });

  registerCommand<OrderCancelledData, unknown>(app, {
    url: '/inventory/order-cancelled',
    consumer: RELEASE_STOCK,
    name: 'OrderCancelled',
    operationId: 'orderCancelled',
    examples: {
      ...orderCancelledExamples,
      result: {
        consumer: RELEASE_STOCK,
        messageId: 'order-1001-cancelled',
        outcome: { result: 'released', orderId: EXAMPLE_ORDERS.envelope, released: [{ bookId: EXAMPLE_BOOK_ID, quantity: 2 }] },
      },
    },
    summary: "Release a cancelled order's reservation (exactly once per message)",
    description: "Consumer inventory.release-stock. Releases the order's live reservations: released, or not-reserved.",
    data: OrderCancelledData,
    outcome: ReleaseOutcome,
    normalize: (d) =>
      d.bookId === undefined ? { orderId: normalizeUuid(d.orderId) } : { orderId: normalizeUuid(d.orderId), bookId: normalizeUuid(d.bookId) },
    run: (trx, { data, key }, now) => releaseStock(trx, { ...data, messageId: key.messageId }, now),
  });
}
