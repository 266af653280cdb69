import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type {
  FastifyInstance,
  FastifyReply,
  FastifyRequest,
  FastifySchemaCompiler,
  onRequestHookHandler,
  preValidationHookHandler,
} from 'fastify';
import type { Static, TObject } from 'typebox';
import type { InboxResult } from '../../inbox/context.js';
import {
  commandBody,
  commandHeaders,
  commandResultSchema,
  type CloudEvent,
  type CommandBody,
  type CommandExamples,
  type Envelope,
} from '../../inbox/command-schemas.js';
import type { InboxRecord } from '../../inbox/inbox.repository.js';
import { binaryCloudEvent, resolveMessageKey, type KeyCandidates } from '../../inbox/key-sources.js';
import type { CommandKind } from '../../inbox/kind.js';
import { scopeKey, type MessageKey } from '../../inbox/message-key.js';
import { CommandRequestError } from './problems.js';

/** How a command route is published and guarded, beside the contract every command route has. */
export interface CommandRouteOptions {
  url: string;
  summary?: string;
  description?: string;
  /** The OpenAPI operationId (what generated clients name the method). */
  operationId?: string;
  tags?: string[];
  security?: { [scheme: string]: string[] }[];
  /** Named request examples per media type, for the OpenAPI document. */
  examples?: CommandExamples;
  /** Named response examples by status (201, 200), for the OpenAPI document. */
  resultExamples?: { 201: unknown; 200: unknown };
  /** The OpenAPI responses besides 201 and 200 (the problems); default: the plugin's. */
  problemResponses?: Record<number, unknown>;
  /** Hooks before anything of the request is read (admission, authentication), in order. */
  onRequest?: onRequestHookHandler[];
  /** Hooks after the body is parsed and before it is validated (a signature over the raw body). */
  preValidation?: preValidationHookHandler[];
  /** The sender's own key space: keys of another scope never meet (undefined: unscoped). */
  keyScope?: (request: FastifyRequest) => string | undefined;
}

/**
 * A command request. The route machinery serves every kind, so the data is typed as the object every
 * data schema describes; the kind's own types take over in its normalize and its work. A request
 * without a Content-Type reaches the handler with no body: the schema applies per media type.
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
 * Reads a command from any accepted form: JSON envelope, CloudEvents structured or binary mode, a
 * Standard Webhooks delivery (its signature is an application's preValidation hook).
 */
export function readCommand(request: CommandRequest): ReceivedCommand {
  const { headers, body } = request;
  if (body === undefined) throw new CommandRequestError('a command needs a JSON body');
  const binary = binaryCloudEvent(headers);
  const candidates: KeyCandidates = {};
  let data: Static<TObject>;
  if (headers['content-type']?.toLowerCase().startsWith('application/cloudevents+json')) {
    if (binary !== undefined) throw new CommandRequestError('a structured CloudEvent must not also carry ce-* headers');
    if (!isCloudEvent(body)) throw new CommandRequestError('a structured CloudEvent needs specversion');
    candidates.cloudEvent = { source: body.source, id: body.id };
    data = body.data;
  } else if (binary !== undefined) {
    if (isEnvelope(body) || isCloudEvent(body)) {
      throw new CommandRequestError('in CloudEvents binary mode the body is the data itself, not an envelope');
    }
    candidates.cloudEvent = { source: binary.source, id: binary.id };
    data = body;
  } else {
    if (!isEnvelope(body)) {
      throw new CommandRequestError('the body must be an envelope { messageId, data } (bare data is for CloudEvents binary mode)');
    }
    candidates.body = body.messageId;
    data = body.data;
  }
  return { key: resolveMessageKey(headers, candidates), data };
}

const formattedTimes = new WeakMap<InboxRecord, { receivedAt: string; processedAt: string }>();

/**
 * The response body of a processed or replayed command; identical for both but for `status`. The
 * message id is the one the sender sent (the record may hold it scoped).
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

/** Sends 201 for a message this request processed, 200 + Idempotent-Replayed for a duplicate. */
export function sendCommandResult(reply: FastifyReply, consumer: string, result: InboxResult<unknown>, messageId?: string): FastifyReply {
  if (result.kind === 'duplicate') reply.header('idempotent-replayed', 'true');
  return reply.code(result.kind === 'processed' ? 201 : 200).send(commandResult(consumer, result, messageId));
}

export const KEY_EXPIRES_HEADER = 'idempotency-key-expires';

const KEY_EXPIRES_HEADER_SCHEMA = {
  type: 'string',
  description:
    'HTTP-date until which this key is remembered at least: the recorded processing time plus the retention of processed keys. ' +
    'A copy sent after it may find the key pruned and be processed again.',
};

const IDEMPOTENT_REPLAYED_HEADER_SCHEMA = {
  type: 'string',
  const: 'true',
  description: 'This answer is a replay: the message was processed before, and nothing was done again',
};

function content(schema: unknown, examples: unknown) {
  return { 'application/json': { schema, ...(examples === undefined ? {} : { examples }) } };
}

/** The route schema of a command: its headers, its body per media type, its results and problems. */
export function commandSchema(
  kind: Pick<CommandKind, 'name' | 'data' | 'outcome'>,
  options: CommandRouteOptions,
  problems: Record<number, unknown>,
) {
  const result = commandResultSchema(kind.outcome, kind.name);
  return {
    ...(options.operationId === undefined ? {} : { operationId: options.operationId }),
    tags: options.tags ?? ['commands'],
    ...(options.summary === undefined ? {} : { summary: options.summary }),
    ...(options.description === undefined ? {} : { description: options.description }),
    ...(options.security === undefined ? {} : { security: options.security }),
    headers: commandHeaders,
    body: commandBody(kind.data, kind.name, options.examples),
    response: {
      201: {
        description: 'This request processed the message; the body is the recorded outcome',
        headers: { [KEY_EXPIRES_HEADER]: KEY_EXPIRES_HEADER_SCHEMA },
        content: content(result, options.resultExamples?.[201]),
      },
      200: {
        description: 'A duplicate: the outcome recorded by the first processing (header Idempotent-Replayed: true)',
        headers: { 'idempotent-replayed': IDEMPOTENT_REPLAYED_HEADER_SCHEMA, [KEY_EXPIRES_HEADER]: KEY_EXPIRES_HEADER_SCHEMA },
        content: content(result, options.resultExamples?.[200]),
      },
      ...(options.problemResponses ?? problems),
    },
  };
}

/**
 * Registers a command route, validated by `validatorCompiler` (the plugin's: bodies as sent): the request
 * is read (key, data), the command runs through the inbox (app.inbox.commands) exactly once, and the
 * answer is 201, or 200 replaying the first outcome. Every refusal is thrown (an InboxError, a
 * KeySourceError, a CommandRequestError) and becomes a problem document in the error handler.
 */
export function registerCommandRoute(
  app: FastifyInstance,
  kind: CommandKind,
  options: CommandRouteOptions,
  validatorCompiler: FastifySchemaCompiler<unknown>,
): void {
  const { onRequest = [], preValidation = [], keyScope } = options;
  app.withTypeProvider<TypeBoxTypeProvider>().post<{ Body: CommandRequestBody }>(
    options.url,
    {
      schema: commandSchema(kind, options, app.inbox.problemResponses),
      config: { consumer: kind.consumer },
      validatorCompiler,
      ...(onRequest.length > 0 ? { onRequest } : {}),
      ...(preValidation.length > 0 ? { preValidation } : {}),
    },
    async (request, reply) => {
      const received = readCommand(request);
      const key = keyScope === undefined ? received.key : scopeKey(keyScope(request), received.key);
      request.inboxKey = key;
      const result = await app.inbox.commands.execute(kind, key, received.data);
      request.inboxResult = result.kind;
      return sendCommandResult(reply, kind.consumer, result, received.key.messageId);
    },
  );
}
