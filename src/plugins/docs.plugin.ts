import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { ProblemDetails } from '../routes/problem.js';

export const API_TAGS = [
  { name: 'commands', description: 'Messages delivered at least once, applied exactly once (inbox)' },
  { name: 'stock', description: 'Stock figures; PUT sets absolute values and needs no inbox' },
  { name: 'inbox', description: 'Admin: inspect and settle inbox records' },
  { name: 'dead-letters', description: 'Admin: messages refused for reusing a key with another payload, and poison messages from the command queues' },
  { name: 'outbox', description: 'Admin: events written with the stock changes, waiting to be published to RabbitMQ' },
  { name: 'operations', description: 'Health, metrics and problem type descriptions' },
];

/** OpenAPI 3.1 generated from the route schemas, with Swagger UI at /docs. */
export const docs = fp(
  async (app: FastifyInstance) => {
    app.addSchema(ProblemDetails);
    await app.register(swagger, {
      openapi: {
        openapi: '3.1.0',
        info: {
          title: 'Bookstore Inventory',
          version: '0.1.0',
          description:
            'Commands are delivered at least once and take effect exactly once. 201: this request processed the message. ' +
            '200 with Idempotent-Replayed: true: a duplicate, answered with the first outcome. Errors are application/problem+json.',
        },
        tags: API_TAGS,
        components: {
          securitySchemes: { adminToken: { type: 'http', scheme: 'bearer', description: 'ADMIN_TOKEN' } },
        },
      },
      refResolver: { buildLocalReference: (json, _baseUri, _fragment, i) => (typeof json.$id === 'string' ? json.$id : `def-${i}`) },
    });
    await app.register(swaggerUi, { routePrefix: '/docs' });
  },
  { name: 'docs' },
);
