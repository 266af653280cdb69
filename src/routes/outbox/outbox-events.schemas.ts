import { Type } from 'typebox';

export const OutboxEventSchema = Type.Object(
  {
    seq: Type.String({ description: 'position in the outbox; events of one book are published in this order' }),
    id: Type.String({ format: 'uuid', description: 'event id, published as the AMQP message-id' }),
    type: Type.String({ description: 'event type, published as the routing key' }),
    source: Type.String(),
    orderingKey: Type.String({ description: 'the book id' }),
    consumer: Type.String({ description: 'the consumer whose command caused the event' }),
    causationId: Type.String({ description: 'the message id of that command' }),
    data: Type.Unknown(),
    occurredAt: Type.String({ format: 'date-time' }),
    attempts: Type.Integer({ description: 'publish attempts so far' }),
    lastError: Type.Union([Type.String(), Type.Null()], { description: 'why the last publish attempt failed; null if none failed' }),
    lastAttemptAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  },
  { $id: 'OutboxEvent', additionalProperties: false },
);

/** What the query lists when it names no state or limit (the validator fills them in). */
export const DEFAULT_STATE = 'pending';
export const PAGE_LIMIT = 50;

export const ListQuery = Type.Object(
  {
    state: Type.Optional(
      Type.Union([Type.Literal('pending'), Type.Literal('failed')], {
        default: DEFAULT_STATE,
        description: 'pending: not yet published; failed: pending events whose last publish attempt failed',
      }),
    ),
    after: Type.Optional(Type.String({ pattern: '^[0-9]{1,18}$', description: 'nextAfter of the previous page' })),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 500, default: PAGE_LIMIT, description: 'Events per page' })),
  },
  { additionalProperties: false },
);
