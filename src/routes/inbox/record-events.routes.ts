import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { eventsCausedBy } from '../../admin/console.repository.js';
import { eventToJson } from '../../outbox/outbox-event.js';
import { adminGuard, adminSecurity } from '../../http/admin-guard.js';
import { ADMIN_PROBLEMS, problemResponses } from '../../http/problem.js';
import { type AdminGuard, LimitQuery } from '../route-options.js';
import { EventSchema, EventsKeyParams } from './record-events.schemas.js';

/** Admin: the outbox events one message caused. */
export async function recordEventRoutes(app: FastifyInstance): Promise<void> {
  registerEventsOfInboxRecord(app, adminGuard(app.config));
}

/** GET /inbox/{consumer}/{messageId}/events: the outbox events a message caused. */
function registerEventsOfInboxRecord(app: FastifyInstance, onRequest: AdminGuard): void {
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  api.get(
    '/inbox/:consumer/:messageId/events',
    {
      onRequest,
      schema: {
        operationId: 'listEventsOfInboxRecord',
        tags: ['inbox'],
        summary: 'The outbox events a message caused (published or pending), in order',
        security: adminSecurity,
        params: EventsKeyParams,
        querystring: LimitQuery,
        response: {
          200: Type.Object({ items: Type.Array(EventSchema) }, { additionalProperties: false, description: "The key's outbox events" }),
          ...problemResponses('invalid-request', ...ADMIN_PROBLEMS),
        },
      },
    },
    async (request) => {
      const { consumer, messageId } = request.params;
      const events = await eventsCausedBy(app.db, consumer, messageId, request.query.limit ?? 100);
      return { items: events.map(eventToJson) };
    },
  );
}
