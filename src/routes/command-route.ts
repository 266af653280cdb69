import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { Webhook, WebhookVerificationError } from 'standardwebhooks';
import type { TSchema } from 'typebox';
import type { Tx } from '../db/database.js';
import { fingerprint } from '../inbox/fingerprint.js';
import { binaryCloudEvent, resolveMessageKey, type Headers, type KeyCandidates } from '../inbox/key-sources.js';
import type { MessageKey } from '../inbox/message-key.js';
import { processOnce, type InboxResult } from '../inbox/process-once.js';
import { commandBody, commandHeaders, commandResultSchema } from './command-schemas.js';
import { ProblemError, problemResponses } from './problem.js';

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

/** One command route: a consumer, the data it accepts, and the work it does inside the claim. */
export interface CommandDefinition<D, O> {
  url: string;
  consumer: string;
  name: string;
  summary: string;
  description: string;
  data: TSchema;
  outcome: TSchema;
  /** Canonical form of validated data (e.g. lower-case uuids): what is fingerprinted and applied. */
  normalize: (data: D) => D;
  /** The work; runs on the claim's transaction, so it commits or rolls back with the claim. */
  run: (trx: Tx, data: D, key: MessageKey, now: Date) => Promise<O>;
}

/** A command as read from the request: its key and its data. */
export interface ReceivedCommand<D> {
  key: MessageKey;
  data: D;
}

interface Envelope<D> {
  messageId?: string;
  data: D;
}

interface CloudEvent<D> {
  id: string;
  source: string;
  data: D;
}

/**
 * Reads a command from any accepted form: JSON envelope, CloudEvents structured or binary mode,
 * a Standard Webhooks delivery. Verifies the webhook signature first when a secret is configured.
 */
export function readCommand<D>(request: FastifyRequest, webhook: Webhook | undefined): ReceivedCommand<D> {
  const headers = request.headers as Headers;
  if (webhook !== undefined) verifySignature(webhook, request);

  const body = request.body as Record<string, unknown> | undefined;
  if (body === undefined || body === null || typeof body !== 'object') {
    throw new ProblemError('invalid-request', { detail: 'a command needs a JSON body' });
  }
  const binary = binaryCloudEvent(headers);
  const candidates: KeyCandidates = {};
  let data: D;
  if (request.headers['content-type']?.toLowerCase().startsWith('application/cloudevents+json')) {
    if (binary !== undefined) throw new ProblemError('invalid-request', { detail: 'a structured CloudEvent must not also carry ce-* headers' });
    const event = body as unknown as CloudEvent<D>;
    candidates.cloudEvent = { source: event.source, id: event.id };
    data = event.data;
  } else if (binary !== undefined) {
    if ('data' in body) throw new ProblemError('invalid-request', { detail: 'in CloudEvents binary mode the body is the data itself, not an envelope' });
    candidates.cloudEvent = { source: binary.source, id: binary.id };
    data = body as D;
  } else {
    if (!('data' in body)) throw new ProblemError('invalid-request', { detail: 'the body must be an envelope { messageId, data } (bare data is for CloudEvents binary mode)' });
    const envelope = body as unknown as Envelope<D>;
    candidates.body = envelope.messageId;
    data = envelope.data;
  }
  return { key: resolveMessageKey(headers, candidates), data };
}

function verifySignature(webhook: Webhook, request: FastifyRequest): void {
  const h = request.headers;
  const id = h['webhook-id'];
  const timestamp = h['webhook-timestamp'];
  const signature = h['webhook-signature'];
  if (typeof id !== 'string' || typeof timestamp !== 'string' || typeof signature !== 'string') {
    throw new ProblemError('invalid-signature', { detail: 'webhook-id, webhook-timestamp and webhook-signature headers are required' });
  }
  try {
    // jsonParse: false: the body parser has read the body already, and the verifier's own JSON.parse
    // throws (a 500) on what that parser accepts, such as a leading byte order mark.
    webhook.verify(request.rawBody ?? '', { 'webhook-id': id, 'webhook-timestamp': timestamp, 'webhook-signature': signature }, { jsonParse: false });
  } catch (error) {
    if (error instanceof WebhookVerificationError) throw new ProblemError('invalid-signature', { detail: error.message });
    throw error;
  }
}

/** The response body of a processed or replayed command; identical for both but for `status`. */
export function commandResult(consumer: string, result: InboxResult<unknown>) {
  const { record } = result;
  return {
    status: result.kind,
    consumer,
    messageId: record.messageId,
    keySource: record.keySource,
    receivedAt: record.receivedAt.toISOString(),
    processedAt: (record.completedAt ?? record.receivedAt).toISOString(),
    outcome: result.outcome,
  };
}

/** Sends 201 for a message this request processed, 200 + Idempotent-Replayed for a duplicate. */
export function sendCommandResult(reply: FastifyReply, consumer: string, result: InboxResult<unknown>): FastifyReply {
  if (result.kind === 'duplicate') reply.header('idempotent-replayed', 'true');
  return reply.code(result.kind === 'processed' ? 201 : 200).send(commandResult(consumer, result));
}

/** Set on 200 and 201 by app.ts; documented here with the rest of the command contract. */
const KEY_EXPIRES_HEADER_SCHEMA = {
  type: 'string',
  description:
    'HTTP-date until which this key is remembered at least: the recorded processing time plus INBOX_RETENTION_DAYS. ' +
    'A copy sent after it may find the key pruned and be processed again.',
};

/** The route schema shared by every command. */
export function commandSchema(def: { name: string; summary: string; description: string; data: TSchema; outcome: TSchema }, extraProblems: number[] = []) {
  const result = commandResultSchema(def.outcome, def.name);
  return {
    tags: ['commands'],
    summary: def.summary,
    description: def.description,
    headers: commandHeaders,
    body: commandBody(def.data, def.name),
    response: {
      201: {
        ...result,
        description: 'This request processed the message; the body is the recorded outcome',
        headers: { 'idempotency-key-expires': KEY_EXPIRES_HEADER_SCHEMA },
      },
      200: {
        ...result,
        description: 'A duplicate: the outcome recorded by the first processing (header Idempotent-Replayed: true)',
        headers: { 'idempotent-replayed': { type: 'string', const: 'true' }, 'idempotency-key-expires': KEY_EXPIRES_HEADER_SCHEMA },
      },
      ...problemResponses(400, 401, 409, 413, 415, 422, ...extraProblems),
    },
  };
}

/** The Standard Webhooks verifier for a configured secret, if any. */
export function webhookVerifier(secret: string | undefined): Webhook | undefined {
  return secret === undefined ? undefined : new Webhook(secret);
}

/**
 * Runs one validated command through the inbox, whatever transport carried it (HTTP, AMQP):
 * normalize, fingerprint, process once. Errors are the inbox's (FingerprintMismatchError, InFlightError, …)
 * or the database's; each transport maps them to its own answer.
 */
export async function executeCommand<D, O>(app: FastifyInstance, def: CommandDefinition<D, O>, key: MessageKey, received: D): Promise<InboxResult<unknown>> {
  const data = def.normalize(received);
  return processOnce(
    app.inboxContext,
    { consumer: def.consumer, key, fingerprint: fingerprint(data), payload: data },
    (trx) => def.run(trx, data, key, app.now()),
  );
}

/** Registers one inbox-backed command route. */
export function registerCommand<D, O>(app: FastifyInstance, def: CommandDefinition<D, O>): void {
  const webhook = webhookVerifier(app.config.webhookSecret);
  app.post(def.url, { schema: commandSchema(def), config: { consumer: def.consumer } }, async (request, reply) => {
    const received = readCommand<D>(request, webhook);
    request.inboxKey = received.key;
    const result = await executeCommand(app, def, received.key, received.data);
    request.inboxResult = result.kind;
    return sendCommandResult(reply, def.consumer, result);
  });
}
