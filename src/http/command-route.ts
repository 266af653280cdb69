import type { FastifyInstance } from 'fastify';
import type { CommandExamples, CommandKind } from '../inbox/machinery.js';
import { commandResultExamples } from './openapi-examples.js';
import './producer-auth.js';
import { problemResponses, UNAVAILABLE_PROBLEMS, type ProblemSlug } from './problem.js';

/** How a command route is published: its address and its OpenAPI operation. */
export interface CommandRouteDocs {
  url: string;
  summary: string;
  description: string;
  /** The OpenAPI operationId (what generated clients name the method). */
  operationId: string;
  /** Named OpenAPI examples: requests per media type, and the outcome of the first JSON example. */
  examples: CommandDocExamples;
  /** Problem types this command answers besides every command's. */
  problems?: ProblemSlug[];
}

export interface CommandDocExamples extends CommandExamples {
  /** The consumer, key and outcome the first JSON example is recorded with. */
  result: { consumer: string; messageId: string; outcome: unknown };
}

const COMMAND_USAGE =
  ' Try the examples in their step order on a fresh service: PUT /stock/{bookId} first (step 1), then each step-2 ' +
  'order-placed example (201), the step-3 cancellations and the step-4 emails. Sending an example again answers 200 with ' +
  'Idempotent-Replayed: true; the same key with another payload (edit the quantity) answers 422 and is dead-lettered.';

const COMMAND_SECURITY: { [scheme: string]: string[] }[] = [{ producerApiKey: [] }, { standardWebhooks: [] }, {}];

/** The problems every command route can answer with. */
const COMMAND_PROBLEMS: ProblemSlug[] = [
  'invalid-request',
  'malformed-json',
  'missing-message-key',
  'invalid-message-key',
  'conflicting-message-keys',
  'invalid-signature',
  'producer-unauthenticated',
  'in-flight',
  'payload-too-large',
  'unsupported-media-type',
  'idempotency-key-reused',
  'rate-limited',
  ...UNAVAILABLE_PROBLEMS,
];

/**
 * Registers one of the service's command routes through the inbox's Fastify adapter
 * (src/adapters/fastify): admission first (a command refused for overload costs nothing more, not even
 * its credential check), then the producer's authentication and rate limit; the key is scoped by the
 * producer; the OpenAPI operation carries the service's problem types, security schemes and examples.
 */
export function registerCommand(app: FastifyInstance, def: CommandKind, docs: CommandRouteDocs): void {
  const { consumer, messageId, outcome } = docs.examples.result;
  app.inbox.command(def, {
    url: docs.url,
    operationId: docs.operationId,
    summary: docs.summary,
    description: docs.description + COMMAND_USAGE,
    // A producer's API key (bearer) or its Standard Webhooks signature; anonymous only without credentials configured.
    security: COMMAND_SECURITY,
    examples: docs.examples,
    resultExamples: commandResultExamples(consumer, messageId, outcome),
    problemResponses: problemResponses(...COMMAND_PROBLEMS, ...(docs.problems ?? [])),
    onRequest: [app.commandAdmission.hook, ...app.producerHooks.onRequest],
    preValidation: app.producerHooks.preValidation,
    // The producer's own key space: another producer's message with the same id is another key.
    keyScope: (request) => request.producer?.scope,
  });
}
