import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import type { Static, TObject, TSchema } from 'typebox';
import type { CommandDefinition } from '../inbox/command.js';
import {
  commandBody,
  commandHeaders,
  commandResultSchema,
  type CloudEvent,
  type CommandBody,
  type CommandExamples,
  type Envelope,
} from '../inbox/command-schemas.js';
import type { InboxRecord } from '../inbox/inbox.repository.js';
import { binaryCloudEvent, resolveMessageKey, type KeyCandidates } from '../inbox/key-sources.js';
import { scopeKey, type MessageKey } from '../inbox/message-key.js';
import type { InboxResult } from '../inbox/process-once.js';
import { commandResultExamples } from './openapi-examples.js';
import './producer-auth.js';
import { ProblemError, problemResponses, UNAVAILABLE_PROBLEMS, type ProblemSlug } from './problem.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The inbox key of the command this request carried, once it was read (for logs and metrics). */
    inboxKey: MessageKey | undefined;
    /** How the inbox settled the command: processed or duplicate (errors are told by the status). */
    inboxResult: InboxResult<unknown>['kind'] | undefined;
  }
  interface FastifyContextConfig {
    /** The consumer a command route feeds; absent on other routes. */
    consumer?: string;
  }
}

/** Declares the per-request command fields once, before any command route is registered. */
export const commandRequests = fp(
  async (app: FastifyInstance) => {
    app.decorateRequest('inboxKey', undefined);
    app.decorateRequest('inboxResult', undefined);
  },
  { name: 'command-requests' },
);

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

/**
 * A command request. The route machinery serves every definition, so the data is typed as the object
 * every data schema describes; the definition's own types take over in its normalize and its work.
 * A request without a Content-Type reaches the handler with no body: the schema applies per media type.
 */
type CommandRequestBody = CommandBody<TObject> | undefined;
type CommandRequest = FastifyRequest<{ Body: CommandRequestBody }>;

/** A command as read from the request: its key and its (validated) data. */
export interface ReceivedCommand {
  key: MessageKey;
  data: Static<TObject>;
}

function isCloudEvent(body: CommandBody<TObject>): body is CloudEvent<TObject> {
  return 'specversion' in body;
}

function isEnvelope(body: CommandBody<TObject>): body is Envelope<TObject> {
  return 'data' in body && !('specversion' in body);
}

/**
 * Reads a command from any accepted form: JSON envelope, CloudEvents structured or binary mode,
 * a Standard Webhooks delivery (its signature is checked before, by producer-auth.ts).
 */
export function readCommand(request: CommandRequest): ReceivedCommand {
  const { headers, body } = request;
  if (body === undefined) throw new ProblemError('invalid-request', { detail: 'a command needs a JSON body' });
  const binary = binaryCloudEvent(headers);
  const candidates: KeyCandidates = {};
  let data: Static<TObject>;
  if (headers['content-type']?.toLowerCase().startsWith('application/cloudevents+json')) {
    if (binary !== undefined)
      throw new ProblemError('invalid-request', { detail: 'a structured CloudEvent must not also carry ce-* headers' });
    if (!isCloudEvent(body)) throw new ProblemError('invalid-request', { detail: 'a structured CloudEvent needs specversion' });
    candidates.cloudEvent = { source: body.source, id: body.id };
    data = body.data;
  } else if (binary !== undefined) {
    if (isEnvelope(body) || isCloudEvent(body)) {
      throw new ProblemError('invalid-request', { detail: 'in CloudEvents binary mode the body is the data itself, not an envelope' });
    }
    candidates.cloudEvent = { source: binary.source, id: binary.id };
    data = body;
  } else {
    if (!isEnvelope(body)) {
      throw new ProblemError('invalid-request', {
        detail: 'the body must be an envelope { messageId, data } (bare data is for CloudEvents binary mode)',
      });
    }
    candidates.body = body.messageId;
    data = body.data;
  }
  return { key: resolveMessageKey(headers, candidates), data };
}

/**
 * The response body of a processed or replayed command; identical for both but for `status`. The
 * message id is the one the sender sent (the record holds it scoped by the producer).
 */
export function commandResult(consumer: string, result: InboxResult<unknown>, messageId = result.record.messageId) {
  const { record } = result;
  // A record never changes once completed, and copies answered from the cache share it: format its
  // timestamps once.
  let times = formattedTimes.get(record);
  if (times === undefined) {
    times = { receivedAt: record.receivedAt.toISOString(), processedAt: (record.completedAt ?? record.receivedAt).toISOString() };
    if (record.completedAt !== null) formattedTimes.set(record, times);
  }
  return {
    status: result.kind,
    consumer,
    messageId,
    keySource: record.keySource,
    receivedAt: times.receivedAt,
    processedAt: times.processedAt,
    outcome: result.outcome,
  };
}

const formattedTimes = new WeakMap<InboxRecord, { receivedAt: string; processedAt: string }>();

/** Sends 201 for a message this request processed, 200 + Idempotent-Replayed for a duplicate. */
export function sendCommandResult(reply: FastifyReply, consumer: string, result: InboxResult<unknown>, messageId?: string): FastifyReply {
  if (result.kind === 'duplicate') reply.header('idempotent-replayed', 'true');
  return reply.code(result.kind === 'processed' ? 201 : 200).send(commandResult(consumer, result, messageId));
}

/** Set on 200 and 201 by app.ts; documented here with the rest of the command contract. */
const KEY_EXPIRES_HEADER_SCHEMA = {
  type: 'string',
  description:
    'HTTP-date until which this key is remembered at least: the recorded processing time plus INBOX_RETENTION_DAYS. ' +
    'A copy sent after it may find the key pruned and be processed again.',
};

const IDEMPOTENT_REPLAYED_HEADER_SCHEMA = {
  type: 'string',
  const: 'true',
  description: 'This answer is a replay: the message was processed before, and nothing was done again',
};

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

/** The route schema of a command: its headers, its body per media type, its results and problems. */
export function commandSchema(def: { name: string; data: TSchema; outcome: TSchema }, docs: CommandRouteDocs) {
  const result = commandResultSchema(def.outcome, def.name);
  const { consumer, messageId, outcome } = docs.examples.result;
  const resultExamples = commandResultExamples(consumer, messageId, outcome);
  return {
    operationId: docs.operationId,
    tags: ['commands'],
    summary: docs.summary,
    description: docs.description + COMMAND_USAGE,
    // A producer's API key (bearer) or its Standard Webhooks signature; anonymous only without credentials configured.
    security: COMMAND_SECURITY,
    headers: commandHeaders,
    body: commandBody(def.data, def.name, docs.examples),
    response: {
      201: {
        description: 'This request processed the message; the body is the recorded outcome',
        headers: { 'idempotency-key-expires': KEY_EXPIRES_HEADER_SCHEMA },
        content: { 'application/json': { schema: result, examples: resultExamples[201] } },
      },
      200: {
        description: 'A duplicate: the outcome recorded by the first processing (header Idempotent-Replayed: true)',
        headers: { 'idempotent-replayed': IDEMPOTENT_REPLAYED_HEADER_SCHEMA, 'idempotency-key-expires': KEY_EXPIRES_HEADER_SCHEMA },
        content: { 'application/json': { schema: result, examples: resultExamples[200] } },
      },
      ...problemResponses(...COMMAND_PROBLEMS, ...(docs.problems ?? [])),
    },
  };
}

/**
 * Registers one command route: the request is read (key, signature, data), the command runs through
 * the inbox (app.commands), and the answer is 201 or a 200 replay. Every refusal is thrown and becomes
 * a problem document in the error handler.
 */
export function registerCommand(app: FastifyInstance, def: CommandDefinition, docs: CommandRouteDocs): void {
  const { preValidation } = app.producerHooks;
  // Admission first: a command refused for overload costs nothing more, not even its credential check.
  const onRequest = [app.commandAdmission, ...app.producerHooks.onRequest];
  app.withTypeProvider<TypeBoxTypeProvider>().post<{ Body: CommandRequestBody }>(
    docs.url,
    {
      schema: commandSchema(def, docs),
      config: { consumer: def.consumer },
      onRequest,
      ...(preValidation.length > 0 ? { preValidation } : {}),
    },
    async (request, reply) => {
      const received = readCommand(request);
      // The producer's own key space: another producer's message with the same id is another key.
      const key = scopeKey(request.producer?.scope, received.key);
      request.inboxKey = key;
      const result = await app.commands.execute(def, key, received.data);
      request.inboxResult = result.kind;
      return sendCommandResult(reply, def.consumer, result, received.key.messageId);
    },
  );
}
