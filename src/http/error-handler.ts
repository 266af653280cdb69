import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { databaseFailureOf, type FailureKind } from '../db/dialect.js';
import { inboxProblem, type ProblemLinks } from '../adapters/fastify/index.js';
import { SideEffectNotPerformedError, SideEffectOutcomeUnknownError } from '../inbox/machinery.js';
import { MalformedJsonError } from './body-parsers.js';
import { fieldErrors, validationDetail } from './validation-messages.js';
import { isTurnedAway, problem, ProblemError, type ProblemDetails, type ProblemSlug } from './problem.js';

const RETRY_AFTER_DATABASE_SECONDS = 2;
/** After a side effect's receiver could not be reached. */
const RETRY_AFTER_UNREACHABLE_SECONDS = 5;

declare module 'fastify' {
  interface FastifyRequest {
    /** The `type` of the problem this request was answered with, if any (for metrics and the request log). */
    problemType: string | undefined;
  }
}

interface Rendered {
  body: ProblemDetails;
  headers: Record<string, string>;
}

/** The media types the body parsers read (every other one is a 415). */
const ACCEPTED_MEDIA_TYPES = ['application/json', 'application/cloudevents+json'];

const FASTIFY_CODES: Record<string, ProblemSlug> = {
  FST_ERR_CTP_EMPTY_JSON_BODY: 'malformed-json',
  FST_ERR_CTP_INVALID_JSON_BODY: 'malformed-json',
};

/** Maps any error to one problem document; the single place where errors become HTTP. */
export function renderError(error: unknown, request: FastifyRequest): Rendered {
  const instance = request.url.split('?')[0];
  return (
    renderRequestError(error, instance) ??
    // Before the inbox's own mapping: the service's one side effect answers with the email's problem types.
    renderSideEffectError(error, instance) ??
    renderInboxError(error, instance) ??
    renderFastifyError(error as Partial<FastifyError>, request, instance) ??
    renderDatabaseError(error, instance) ?? { body: problem('internal-error', { instance }), headers: {} }
  );
}

/** A problem a route or plugin threw as such, or unreadable JSON. */
function renderRequestError(error: unknown, instance: string | undefined): Rendered | undefined {
  if (error instanceof ProblemError) {
    return { body: problem(error.slug, { detail: error.message, instance, ...error.extra }), headers: error.headers };
  }
  if (error instanceof MalformedJsonError) return { body: problem('malformed-json', { detail: error.message, instance }), headers: {} };
  return undefined;
}

/** Where the inbox's problems point: the service's operator routes. */
const INBOX_LINKS: ProblemLinks = {
  inboxRecord: inboxPath,
  reconcile: (consumer, messageId) => `${inboxPath(consumer, messageId)}/reconcile`,
  deadLetter: (id) => `/dead-letters/${id}`,
};

/**
 * The inbox's refusals (a copy in flight, a full queue, a record to reconcile, a reused key, a key or
 * command that could not be read), as the inbox's adapter maps them, with the service's links.
 */
function renderInboxError(error: unknown, instance: string | undefined): Rendered | undefined {
  const found = inboxProblem(error, INBOX_LINKS);
  if (found === undefined) return undefined;
  return { body: problem(found.slug, { detail: found.detail, instance, ...found.fields }), headers: { ...found.headers } };
}

/** A two-phase side effect that was not performed, or whose outcome is unknown. */
function renderSideEffectError(error: unknown, instance: string | undefined): Rendered | undefined {
  if (error instanceof SideEffectNotPerformedError) {
    // The only two-phase side effect is the stock-reserved email: its problem types name the email provider.
    return {
      body: problem(error.reason === 'refused' ? 'email-provider-failed' : 'email-provider-unavailable', {
        detail: `${error.message}; nothing was sent and the claim was released`,
        instance,
      }),
      headers: error.reason === 'unreachable' ? { 'retry-after': String(RETRY_AFTER_UNREACHABLE_SECONDS) } : {},
    };
  }
  if (error instanceof SideEffectOutcomeUnknownError) {
    return {
      body: problem(error.reason === 'failed' ? 'email-provider-error' : 'email-provider-timeout', {
        detail: `${error.message}; the email may have been sent. The record stays in progress`,
        instance,
        consumer: error.consumer,
        messageId: error.messageId,
        inboxRecord: inboxPath(error.consumer, error.messageId),
      }),
      headers: {},
    };
  }
  return undefined;
}

/** Fastify's own errors: schema validation, content type, body size, and other 4xx it raises. */
function renderFastifyError(
  fastifyError: Partial<FastifyError>,
  request: FastifyRequest,
  instance: string | undefined,
): Rendered | undefined {
  if (Array.isArray(fastifyError.validation)) {
    const errors = fieldErrors(fastifyError.validation, fastifyError.validationContext ?? 'request');
    return { body: problem('invalid-request', { detail: validationDetail(errors), instance, errors }), headers: {} };
  }
  if (fastifyError.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') {
    const type = request.headers['content-type']?.split(';')[0]?.trim();
    return {
      body: problem('unsupported-media-type', {
        detail: `this route accepts ${ACCEPTED_MEDIA_TYPES.join(' or ')}${type === undefined || type === '' ? '' : `, not ${type}`}`,
        instance,
      }),
      headers: {},
    };
  }
  if (fastifyError.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
    return { body: problem('payload-too-large', { detail: 'request bodies are limited to 64 KiB', instance }), headers: {} };
  }
  const mapped = fastifyError.code === undefined ? undefined : FASTIFY_CODES[fastifyError.code];
  if (mapped !== undefined) return { body: problem(mapped, { detail: fastifyError.message, instance }), headers: {} };
  const status = fastifyError.statusCode;
  if (status === 414) {
    return { body: problem('uri-too-long', { detail: 'a path parameter is longer than the service reads', instance }), headers: {} };
  }
  if (typeof status === 'number' && status >= 400 && status < 500) {
    const body = problem('bad-request', { detail: fastifyError.message, instance });
    return { body: { ...body, status, title: status === 404 ? 'Not found' : body.title }, headers: {} };
  }
  return undefined;
}

/** The answer to each database failure that is the database's state, not the request's fault. */
const UNAVAILABLE: Readonly<Record<FailureKind, ProblemSlug | undefined>> = {
  busy: 'overloaded',
  'lock-timeout': 'database-busy',
  deadlock: 'database-busy',
  'connection-lost': 'database-unavailable',
  'read-only': 'database-unavailable',
  'serialization-conflict': undefined,
  duplicate: undefined,
};

/**
 * A database that is busy, out of pooled connections or unreachable. Busy and overloaded are not
 * outages: the database answers, this request was turned away. Each has its own type so an operator
 * can tell them apart (more capacity, shorter transactions, or a restart).
 */
function renderDatabaseError(error: unknown, instance: string | undefined): Rendered | undefined {
  const failure = databaseFailureOf(error);
  const unavailable = failure === undefined ? undefined : UNAVAILABLE[failure.kind];
  if (unavailable === undefined) return undefined;
  return {
    body: problem(unavailable, { instance, retryAfterSeconds: RETRY_AFTER_DATABASE_SECONDS }),
    headers: { 'retry-after': String(RETRY_AFTER_DATABASE_SECONDS) },
  };
}

/** The admin address of one inbox record. */
export function inboxPath(consumer: string, messageId: string): string {
  return `/inbox/${encodeURIComponent(consumer)}/${encodeURIComponent(messageId)}`;
}

/** Sends a problem document with its media type. */
export function sendProblem(reply: FastifyReply, rendered: Rendered): FastifyReply {
  return reply.code(rendered.body.status).headers(rendered.headers).type('application/problem+json').send(rendered.body);
}

/** Every error and every unknown route answers with application/problem+json. */
export const errorHandler = fp(
  async (app: FastifyInstance) => {
    app.decorateRequest('problemType', undefined);
    app.setErrorHandler((error, request, reply) => {
      const rendered = renderError(error, request);
      request.problemType = rendered.body.type;
      // A turned-away 503 is expected under load: the request log's one warn line is enough.
      if (rendered.body.status >= 500 && !isTurnedAway(rendered.body.type)) request.log.error({ err: error }, 'request failed');
      // The request log's one line per request names the problem type; the detail is for debugging.
      else request.log.debug({ problem: rendered.body.type, detail: rendered.body.detail }, 'request refused');
      return sendProblem(reply, rendered);
    });
    // Every route's method and path, so that an address that exists for other methods answers 405.
    const routes: { method: string; path: RegExp }[] = [];
    app.addHook('onRoute', (route) => {
      const pattern = route.url.replace(/[.*+?^${}()|[\]\\]/g, '\\$&').replace(/:[A-Za-z0-9_]+/g, '[^/]+');
      for (const method of [route.method].flat()) routes.push({ method, path: new RegExp(`^${pattern}/?$`) });
    });
    app.setNotFoundHandler((request, reply) => {
      const path = request.url.split('?')[0]!;
      const allowed = [...new Set(routes.filter((r) => r.path.test(path)).map((r) => r.method))];
      const rendered: Rendered =
        allowed.length > 0
          ? {
              body: problem('method-not-allowed', {
                detail: `${path} answers ${allowed.join(', ')}, not ${request.method}`,
                instance: path,
              }),
              headers: { allow: allowed.join(', ') },
            }
          : { body: problem('not-found', { detail: `no route ${request.method} ${path}`, instance: path }), headers: {} };
      request.problemType = rendered.body.type;
      return sendProblem(reply, rendered);
    });
  },
  { name: 'error-handler' },
);
