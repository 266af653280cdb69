import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { eventToJson } from '../../outbox/outbox-event.js';
import { listOutboxEvents } from '../../outbox/outbox.repository.js';
import { adminGuard, adminSecurity } from '../../http/admin-guard.js';
import { pageSchema } from '../../http/page.js';
import { ADMIN_PROBLEMS, problemResponses } from '../../http/problem.js';
import { DEFAULT_STATE, ListQuery, OutboxEventSchema, PAGE_LIMIT } from './outbox-events.schemas.js';

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
