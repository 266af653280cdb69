import { Type, type Static } from 'typebox';
import { Uuid } from '../inbox/machinery.js';

/**
 * The inventory commands' data and outcomes: validated on the way in, published in the OpenAPI
 * document, and the types the stock repository works with (each type is its schema's Static).
 */

export const OrderPlacedData = Type.Object(
  { orderId: Uuid, bookId: Uuid, quantity: Type.Integer({ minimum: 1, maximum: 1000 }) },
  { additionalProperties: false },
);
export type OrderPlacedData = Static<typeof OrderPlacedData>;

export const OrderCancelledData = Type.Object(
  {
    orderId: Uuid,
    bookId: Type.Optional(Type.String({ format: 'uuid', description: 'release only this book; all of the order when absent' })),
  },
  { additionalProperties: false },
);
export type OrderCancelledData = Static<typeof OrderCancelledData>;

const line = { orderId: Uuid, bookId: Uuid, quantity: Type.Integer() };
export const ReserveOutcome = Type.Union([
  Type.Object({ result: Type.Literal('reserved'), ...line }, { additionalProperties: false }),
  Type.Object({ result: Type.Literal('insufficient-stock'), ...line, available: Type.Integer() }, { additionalProperties: false }),
  Type.Object({ result: Type.Literal('unknown-book'), ...line }, { additionalProperties: false }),
  Type.Object(
    {
      result: Type.Literal('order-cancelled'),
      ...line,
      cancelledBy: Type.Optional(
        Type.String({
          description:
            'the key of the cancellation (of the whole order, or of this book) processed before; present only when that ' +
            "cancellation is in the sender's own key space (never another producer's message id)",
        }),
      ),
    },
    { additionalProperties: false, description: 'the order, or this line of it, was cancelled before this placement was processed' },
  ),
  Type.Object(
    {
      result: Type.Literal('already-reserved'),
      ...line,
      existing: Type.Object(
        {
          quantity: Type.Integer(),
          reservedBy: Type.Optional(
            Type.String({
              description:
                "the key of the message that made the reservation; present only when it is in the sender's own key space " +
                "(never another producer's message id)",
            }),
          ),
          released: Type.Boolean(),
        },
        { additionalProperties: false, description: 'the reservation this order already has for this book' },
      ),
    },
    { additionalProperties: false },
  ),
]);
export type ReserveOutcome = Static<typeof ReserveOutcome>;

export const ReleaseOutcome = Type.Union([
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
export type ReleaseOutcome = Static<typeof ReleaseOutcome>;
