import type { FastifyInstance } from 'fastify';
import { commandKind } from '../command-kinds.js';
import type { CommandExamples, CommandKind } from '../inbox/machinery.js';
import { commandResultExamples } from './openapi-examples.js';
import './producer-auth.js';
import { problemResponses, UNAVAILABLE_PROBLEMS, type ProblemSlug } from './problem.js';

/** How a command route is published: its OpenAPI operation (its address is in src/command-kinds.ts). */
export interface CommandRouteDocs {
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
 * The hooks before a command's handler. Anonymous commands (no credentials configured): admission
 * first, so a command refused for overload costs nothing more. With producers: a credential that can be
 * checked from the headers (an API key) is checked before admission, so a client without one never
 * takes a place of the bound; a signed delivery, whose signature needs the body, is read under a bound
 * of its own and a short body timeout, and joins the commands' bound once verified. The rate limit comes
 * last, once the producer is known.
 */
function admissionAndAuthentication(app: FastifyInstance) {
  const { producerHooks: auth, commandAdmission: admission } = app;
  if (!auth.authenticated) return { onRequest: [admission.hook], preValidation: auth.rateLimit };
  return {
    onRequest: [...auth.onRequest, admission.afterHeaders],
    preValidation: [...auth.verify, admission.onceVerified, ...auth.rateLimit],
  };
}

/**
 * Registers one of the service's command routes through the inbox's Fastify adapter
 * (src/adapters/fastify): admission and the producer's authentication and rate limit (above); the key is
 * scoped by the producer; the OpenAPI operation carries the service's problem types, security schemes
 * and examples.
 */
export function registerCommand(app: FastifyInstance, def: CommandKind, docs: CommandRouteDocs): void {
  const { consumer, messageId, outcome } = docs.examples.result;
  app.inbox.command(def, {
    url: commandKind(def.consumer).url,
    operationId: docs.operationId,
    summary: docs.summary,
    description: docs.description + COMMAND_USAGE,
    // A producer's API key (bearer) or its Standard Webhooks signature; anonymous only without credentials configured.
    security: COMMAND_SECURITY,
    examples: docs.examples,
    resultExamples: commandResultExamples(consumer, messageId, outcome),
    problemResponses: problemResponses(...COMMAND_PROBLEMS, ...(docs.problems ?? [])),
    ...admissionAndAuthentication(app),
    // The producer's own key space: another producer's message with the same id is another key.
    keyScope: (request) => request.producer?.scope,
  });
}
