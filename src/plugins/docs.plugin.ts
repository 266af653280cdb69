import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { ProblemDetails } from '../http/problem.js';
import { SWAGGER_UI_EXAMPLES_SCRIPT } from './swagger-ui-examples.js';

/** In the order a person follows the examples: set the stock first, then send commands. */
export const API_TAGS = [
  { name: 'stock', description: 'Stock figures; PUT sets absolute values and needs no inbox (step 1 of the examples)' },
  { name: 'commands', description: 'Messages delivered at least once, applied exactly once (inbox); steps 2 to 4 of the examples' },
  { name: 'inbox', description: 'Admin: inspect and settle inbox records' },
  {
    name: 'dead-letters',
    description: 'Admin: messages refused for reusing a key with another payload, and poison messages from the command queues',
  },
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
            '200 with Idempotent-Replayed: true: a duplicate, answered with the first outcome. Errors are application/problem+json.\n\n' +
            'The examples are one walkthrough that works as it is on a fresh service, step by step: ' +
            '1. PUT /stock/{bookId} (Authorize with ADMIN_TOKEN first, when it is set) creates the example book; ' +
            '2. each POST /inventory/order-placed example reserves copies of it, one per key source; ' +
            '3. POST /inventory/order-cancelled releases two of those orders; 4. POST /notifications/stock-reserved-email. ' +
            'Execute an example twice to see the duplicate (200, Idempotent-Replayed: true); change its quantity and execute ' +
            'it again to see 422 idempotency-key-reused and its dead-letter link.',
          license: { name: 'MIT', identifier: 'MIT' },
        },
        // Relative: the document describes the service that serves it, on whatever host and port it listens.
        servers: [{ url: '/', description: 'This service' }],
        tags: API_TAGS,
        components: {
          securitySchemes: {
            adminToken: { type: 'http', scheme: 'bearer', description: 'ADMIN_TOKEN' },
            producerApiKey: {
              type: 'http',
              scheme: 'bearer',
              description: "A producer's API key (PRODUCER_API_KEYS or PRODUCERS_FILE hold its SHA-256 digest)",
            },
            standardWebhooks: {
              type: 'apiKey',
              in: 'header',
              name: 'webhook-signature',
              description:
                "A Standard Webhooks signature made with a producer's secret (PRODUCER_WEBHOOK_SECRETS, PRODUCERS_FILE or " +
                'WEBHOOK_SECRET), sent with webhook-id and webhook-timestamp: ' +
                '`webhook-signature: v1,<base64 HMAC-SHA256 of id.timestamp.body>`',
            },
          },
        },
      },
      refResolver: { buildLocalReference: (json, _baseUri, _fragment, i) => (typeof json.$id === 'string' ? json.$id : `def-${i}`) },
    });
    // Everything the page loads comes from this service (no online validator badge), so it works offline.
    // The examples script makes every walkthrough example work as clicked (see swagger-ui-examples.ts).
    await app.register(swaggerUi, {
      routePrefix: '/docs',
      validatorUrl: false,
      uiConfig: { displayOperationId: true },
      theme: { title: 'Bookstore Inventory API', js: [{ filename: 'examples.js', content: SWAGGER_UI_EXAMPLES_SCRIPT }] },
    });
  },
  { name: 'docs' },
);
