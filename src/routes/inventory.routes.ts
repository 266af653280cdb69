import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { stockEventsFor } from '../inventory/stock-events.js';
import {
  normalizeUuid,
  releaseStock,
  reserveStock,
  reserveStockBatch,
  type ReleaseOutcome as ReleaseResult,
  type ReserveOutcome as ReserveResult,
} from '../inventory/stock.repository.js';
import { insertOutboxEvents } from '../outbox/outbox.repository.js';
import { Uuid } from '../inbox/command-schemas.js';
import { registerCommand, type CommandDefinition } from '../http/command-route.js';
import { EXAMPLE_BOOK_ID, EXAMPLE_ORDERS, orderCancelledExamples, orderPlacedExamples } from '../http/openapi-examples.js';

export const RESERVE_STOCK = 'inventory.reserve-stock';
export const RELEASE_STOCK = 'inventory.release-stock';

const OrderPlacedData = Type.Object(
  { orderId: Uuid, bookId: Uuid, quantity: Type.Integer({ minimum: 1, maximum: 1000 }) },
  { additionalProperties: false },
);
export interface OrderPlacedData {
  orderId: string;
  bookId: string;
  quantity: number;
}

const OrderCancelledData = Type.Object(
  { orderId: Uuid, bookId: Type.Optional({ ...Uuid, description: 'release only this book; all of the order when absent' }) },
  { additionalProperties: false },
);
export interface OrderCancelledData {
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

/** OrderPlaced: reserve stock. Shared by the HTTP route and the AMQP consumer. */
export const orderPlacedCommand: CommandDefinition<OrderPlacedData, ReserveResult> = {
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
  run: async (trx, { data, key }, now) => {
    const outcome = await reserveStock(trx, { ...data, messageId: key.messageId }, now);
    await insertOutboxEvents(trx, stockEventsFor(RESERVE_STOCK, key.messageId, outcome, now));
    return outcome;
  },
  // The set-based reservation, then every claimed message's events in one multi-row insert.
  runBatch: async (trx, items, now) => {
    const outcomes = await reserveStockBatch(trx, items.map(({ data, key }) => ({ ...data, messageId: key.messageId })), now);
    await insertOutboxEvents(trx, items.flatMap(({ key }, i) => stockEventsFor(RESERVE_STOCK, key.messageId, outcomes[i]!, now)));
    return outcomes;
  },
};

/** OrderCancelled: release the order's reservations. Shared by the HTTP route and the AMQP consumer. */
export const orderCancelledCommand: CommandDefinition<OrderCancelledData, ReleaseResult> = {
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
  run: async (trx, { data, key }, now) => {
    const outcome = await releaseStock(trx, { ...data, messageId: key.messageId }, now);
    await insertOutboxEvents(trx, stockEventsFor(RELEASE_STOCK, key.messageId, outcome, now));
    return outcome;
  },
};

/** The inventory commands: reserve stock for a placed order, release it for a cancelled one. */
export async function inventoryRoutes(app: FastifyInstance): Promise<void> {
  registerCommand(app, orderPlacedCommand);
  registerCommand(app, orderCancelledCommand);
}
