import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { eventToJson } from '../outbox/outbox-event.js';
import { listOutboxEvents } from '../outbox/outbox.repository.js';
import { adminGuard, adminSecurity } from '../http/admin-guard.js';
import { pageSchema } from '../http/page.js';
import { ADMIN_PROBLEMS, problemResponses } from '../http/problem.js';

const OutboxEventSchema = Type.Object(
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
const DEFAULT_STATE = 'pending';
const PAGE_LIMIT = 50;

const ListQuery = Type.Object(
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

/** Admin: the events waiting in the outbox. */
export async function outboxRoutes(app: FastifyInstance): Promise<void> {
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  app.addSchema(OutboxEventSchema);

  api.get(
    '/outbox',
    {
      onRequest: adminGuard(app.config),
      schema: {
        operationId: 'listOutboxEvents',
        tags: ['outbox'],
        summary: 'Outbox events not yet published, oldest first (keyset-paged)',
        description:
          'Events are written in the same transaction as the stock change that caused them and published to AMQP_EXCHANGE by the relay ' +
          '(publisher confirms; only a confirmed event counts as published). state=pending lists every event still waiting; ' +
          'state=failed only those whose last publish attempt failed, with the reason. Both retry by themselves: ' +
          'a growing list means the broker is unreachable or refusing (see outbox_oldest_pending_age_seconds). ' +
          'Without AMQP_URL no relay runs and every event stays pending.',
        security: adminSecurity,
        querystring: ListQuery,
        response: {
          200: pageSchema(Type.Ref('OutboxEvent')),
          ...problemResponses('invalid-request', ...ADMIN_PROBLEMS),
        },
      },
    },
    async (request) => {
      const { state = DEFAULT_STATE, after, limit = PAGE_LIMIT } = request.query;
      const page = await listOutboxEvents(app.db, { state, after, limit });
      return { items: page.items.map(eventToJson), nextAfter: page.nextAfter };
    },
  );
}
