import { Type, type Static } from 'typebox';
import { inboxProblems, PROBLEM_MEDIA_TYPE } from '../adapters/fastify/index.js';

export { PROBLEM_MEDIA_TYPE };

/** RFC 9457 problem details; `type` is a path on this service that documents the problem. */
export const ProblemDetails = Type.Object(
  {
    type: Type.String({ description: 'URI reference identifying the problem type; GET it for its description' }),
    title: Type.String(),
    status: Type.Integer({ minimum: 400, maximum: 599 }),
    detail: Type.Optional(Type.String()),
    instance: Type.Optional(Type.String()),
    errors: Type.Optional(Type.Array(Type.Object({ location: Type.String(), message: Type.String() }, { additionalProperties: false }))),
    consumer: Type.Optional(Type.String()),
    messageId: Type.Optional(Type.String()),
    storedFingerprint: Type.Optional(Type.String()),
    receivedFingerprint: Type.Optional(Type.String()),
    deadLetter: Type.Optional(Type.String({ description: 'where the refused message was recorded' })),
    inboxRecord: Type.Optional(Type.String({ description: 'the inbox record to look at' })),
    reconcile: Type.Optional(Type.String({ description: 'where to settle a half-done side effect' })),
    retryAfterSeconds: Type.Optional(Type.Integer()),
    leaseUntil: Type.Optional(
      Type.String({ format: 'date-time', description: "when the record's current attempt is no longer presumed alive" }),
    ),
  },
  { $id: 'ProblemDetails', additionalProperties: true, description: 'RFC 9457 problem details' },
);
export type ProblemDetails = Static<typeof ProblemDetails>;

export const problemRef = Type.Ref('ProblemDetails');

/**
 * Every problem type the service answers with: the inbox's (src/adapters/fastify/problems.ts) and the
 * service's own, slug -> status, title and a description for people.
 */
export const problems = inboxProblems.extend({
  'malformed-json': {
    status: 400,
    title: 'The body is not valid JSON',
    description: 'The body could not be parsed as JSON. Nothing was recorded.',
  },
  'bad-request': { status: 400, title: 'Bad request', description: 'The request could not be read. Nothing was recorded.' },
  unauthorized: { status: 401, title: 'Authentication required', description: 'This route needs Authorization: Bearer <ADMIN_TOKEN>.' },
  'invalid-signature': {
    status: 401,
    title: 'The webhook signature is missing, wrong or stale',
    description:
      'With WEBHOOK_SECRET set, every command must carry webhook-id, webhook-timestamp (within 5 minutes) and a ' +
      'webhook-signature over id.timestamp.body. Nothing was recorded.',
  },
  'producer-unauthenticated': {
    status: 401,
    title: 'A producer credential is required',
    description:
      'Commands need a producer credential: Authorization: Bearer <API key>, or a Standard Webhooks signature made with a ' +
      "producer's secret. The credential was missing or is not one of the configured producers'. Nothing was recorded.",
  },
  forbidden: { status: 403, title: 'Forbidden', description: 'With no ADMIN_TOKEN configured, admin routes answer loopback clients only.' },
  'untrusted-host': {
    status: 403,
    title: 'The request names a host that is not this service',
    description:
      "Admin routes answer only requests whose Host is one of the service's own names: localhost, 127.0.0.1, [::1], HOST, or " +
      'one listed in ADMIN_ALLOWED_HOSTS. Another name means a page reached the service through a name that is not its own ' +
      '(DNS rebinding). Nothing was read or changed.',
  },
  'cross-site-request': {
    status: 403,
    title: 'A page of another site sent this admin request',
    description:
      'Admin requests that change something are refused when a browser says they come from another origin (an Origin that is ' +
      "not the service's own, or Sec-Fetch-Site: cross-site or same-site). The console, served by the service itself, is " +
      'same-origin; scripts and curl send neither header. Nothing was changed.',
  },
  'not-found': { status: 404, title: 'Not found', description: 'There is nothing at this address.' },
  'method-not-allowed': {
    status: 405,
    title: 'Method not allowed',
    description: 'The address exists, but not for this method: the Allow header lists the methods it answers. Nothing was recorded.',
  },
  'rate-limited': {
    status: 429,
    title: 'Too many commands from this producer',
    description:
      'The producer sent more commands than RATE_LIMIT_MAX in RATE_LIMIT_WINDOW_MS. Nothing was recorded: retry after the ' +
      'Retry-After delay.',
  },
  'not-in-progress': {
    status: 409,
    title: 'The inbox record is not in progress',
    description: 'Only an in-progress record can be reconciled.',
  },
  'lease-not-expired': {
    status: 409,
    title: 'An attempt may still be performing the side effect',
    description:
      "The record's current attempt is inside its lease (leaseUntil): it settles the record itself when it ends. Nothing was " +
      'changed; reconcile after the Retry-After delay if the record is still in progress then.',
  },
  'not-replayable': {
    status: 409,
    title: 'This dead letter cannot be replayed',
    description:
      'A key-reuse dead letter (422) carries a payload the key was not first processed with: under that key the inbox keeps the ' +
      'first outcome and refuses any other payload, so a replay would be refused again. Send the new payload under a new key, ' +
      'then discard the letter. A letter whose kept bytes can only be refused again (not JSON, cut at the size limit, no usable ' +
      'key) and a letter of a consumer that no queue of this service feeds cannot be run again either.',
  },
  'stock-below-reserved': {
    status: 409,
    title: 'On-hand stock cannot go below what is reserved',
    description: 'Release reservations first, or set a larger on-hand count.',
  },
  'request-timeout': {
    status: 408,
    title: 'The request did not arrive in time',
    description:
      'Its headers took longer than HTTP_HEADERS_TIMEOUT_MS, or the whole request longer than HTTP_REQUEST_TIMEOUT_MS, to arrive ' +
      '(the body of a signed delivery, whose signature needs it, longer than HTTP_UNVERIFIED_BODY_TIMEOUT_MS). ' +
      'The connection was closed. Nothing was recorded.',
  },
  'payload-too-large': {
    status: 413,
    title: 'The body is too large',
    description: 'Request bodies are limited to 64 KiB. Nothing was recorded.',
  },
  'uri-too-long': {
    status: 414,
    title: 'The address is too long',
    description: 'A path parameter is longer than the service reads (an inbox key is at most 200 characters). Nothing was recorded.',
  },
  'unsupported-media-type': {
    status: 415,
    title: 'Unsupported media type',
    description: 'Commands accept application/json and application/cloudevents+json. Nothing was recorded.',
  },
  'headers-too-large': {
    status: 431,
    title: 'Request header fields too large',
    description: "The request's headers (with its address) exceed the 16 KiB Node.js reads. Nothing was recorded.",
  },
  'internal-error': {
    status: 500,
    title: 'Internal error',
    description: 'The request failed inside the service. Its transaction was rolled back, so it can be retried.',
  },
  'email-provider-failed': {
    status: 502,
    title: 'The email provider refused the request',
    description: 'The provider answered a 4xx that proves nothing was sent; the claim was released, so a retry starts clean.',
  },
  'email-provider-error': {
    status: 502,
    title: 'The email provider answered with an error; the email may have been sent',
    description:
      'A 5xx, 408, 409, 425 or 429 does not prove that nothing was sent (a gateway may answer 502 after the provider acted). The ' +
      'record stays in progress: the next copy resends under the same Idempotency-Key when the provider deduplicates, and is ' +
      'told needs-reconciliation otherwise.',
  },
  'email-provider-unavailable': {
    status: 503,
    title: 'The email provider could not be reached',
    description: 'Nothing was sent; the claim was released, so a retry starts clean.',
  },
  'shutting-down': {
    status: 503,
    title: 'The service is shutting down',
    description:
      'This instance is stopping and did not start the request. Retry after the Retry-After delay, or send it to another instance.',
  },
  'database-busy': {
    status: 503,
    title: 'The database is busy',
    description:
      'A statement waited too long for rows other work holds, or was chosen as a deadlock victim; it was rolled back and ' +
      'changed nothing. Retry after the Retry-After delay.',
  },
  'database-unavailable': {
    status: 503,
    title: 'The database is unavailable',
    description: 'The transaction did not commit. Retry after the Retry-After delay.',
  },
  'email-provider-timeout': {
    status: 504,
    title: 'The email provider did not answer in time',
    description:
      'No answer came (a timeout, or the connection was lost after the request went out): the email may or may not have been ' +
      'sent. The record stays in progress: the next copy resends under the same Idempotency-Key when the provider ' +
      'deduplicates, and is told needs-reconciliation otherwise.',
  },
});

export const PROBLEM_TYPES = problems.types;

export type ProblemSlug = (typeof problems.slugs)[number];

export const PROBLEM_PATH = '/problems/';

/**
 * 503s that turn a request away by design (too much load, shutting down, a lock waited on too long):
 * nothing ran, the sender retries. Expected under load, so logged at warn without a stack, and sparsely.
 */
const TURNED_AWAY: ReadonlySet<string> = new Set(['overloaded', 'shutting-down', 'database-busy'].map((slug) => `${PROBLEM_PATH}${slug}`));

/** True when a problem `type` is one of the expected, turned-away 503s. */
export function isTurnedAway(type: string | undefined): boolean {
  return type !== undefined && TURNED_AWAY.has(type);
}

/** True when `value` names a problem type of this service. */
export function isProblemSlug(value: string): value is ProblemSlug {
  return problems.has(value);
}

/** Builds a problem document of a known type. */
export function problem(slug: ProblemSlug, extra: Partial<ProblemDetails> = {}): ProblemDetails {
  const known = PROBLEM_TYPES[slug];
  return { type: `${PROBLEM_PATH}${slug}`, title: known.title, status: known.status, ...extra };
}

/** An error that is already a problem; thrown by routes and plugins, rendered by the error handler. */
export class ProblemError extends Error {
  override readonly name = 'ProblemError';
  constructor(
    readonly slug: ProblemSlug,
    readonly extra: Partial<ProblemDetails> = {},
    readonly headers: Record<string, string> = {},
  ) {
    super(extra.detail ?? PROBLEM_TYPES[slug].title);
  }
}

/**
 * Response schemas for the problems a route can answer with, keyed by media type so the OpenAPI
 * document says application/problem+json. Name the problem types the route can return. Fastify picks a serializer by the reply's content
 * type, and the error handler always sends problems as application/problem+json, so this schema is the
 * one that serializes them.
 */
export function problemResponses(...slugs: ProblemSlug[]): Record<number, unknown> {
  return problems.responses(slugs, {
    schema: problemRef,
    headers: PROBLEM_HEADERS,
    example: (slug) => problem(slug, PROBLEM_EXAMPLE_EXTRAS[slug] ?? {}),
  });
}

/** What the admin guard answers: no or a wrong bearer token; no token configured and a client not on loopback. */
export const ADMIN_PROBLEMS = ['unauthorized', 'forbidden', 'untrusted-host', 'cross-site-request'] as const satisfies ProblemSlug[];

/** The 503s any route that reads or writes the database can answer with. */
export const UNAVAILABLE_PROBLEMS = [
  'shutting-down',
  'database-busy',
  'overloaded',
  'database-unavailable',
] as const satisfies ProblemSlug[];

const RETRY_AFTER_HEADER = {
  type: 'string',
  pattern: '^[0-9]+$',
  description: 'Seconds to wait before retrying (sent with in-flight, rate-limited, shutting-down and database-unavailable)',
};

/** The headers a problem status is sent with. */
const PROBLEM_HEADERS: Record<number, Record<string, unknown>> = {
  401: {
    'www-authenticate': {
      type: 'string',
      const: 'Bearer',
      description: 'Sent with unauthorized (admin routes) and producer-unauthenticated (commands): a bearer token is expected',
    },
  },
  409: { 'retry-after': RETRY_AFTER_HEADER },
  429: { 'retry-after': RETRY_AFTER_HEADER },
  503: { 'retry-after': RETRY_AFTER_HEADER },
};

/** What a problem of each type looks like, beyond its type, title and status. */
const PROBLEM_EXAMPLE_EXTRAS: Partial<Record<ProblemSlug, Partial<ProblemDetails>>> = {
  'invalid-request': {
    detail: 'body/data/quantity must be >= 1',
    errors: [{ location: 'body/data/quantity', message: 'must be >= 1' }],
  },
  'malformed-json': { detail: 'Unexpected end of JSON input' },
  'missing-message-key': { detail: 'no idempotency key: send messageId, an Idempotency-Key header, a CloudEvent id or a webhook-id' },
  'invalid-message-key': { detail: 'the key must be 1-200 visible ASCII characters' },
  'conflicting-message-keys': { detail: 'the body messageId and the Idempotency-Key header carry different keys' },
  unauthorized: { detail: 'missing or wrong bearer token' },
  'invalid-signature': { detail: 'No matching signature found' },
  'producer-unauthenticated': { detail: 'the bearer token is not a producer API key' },
  'rate-limited': { detail: 'producer "orders" sent more than 1000 commands in 1000 ms', retryAfterSeconds: 1 },
  forbidden: { detail: 'set ADMIN_TOKEN to use admin routes from other hosts' },
  'untrusted-host': { detail: 'Host attacker.example is not a name of this service (ADMIN_ALLOWED_HOSTS)' },
  'cross-site-request': { detail: 'a page of http://127.0.0.1:8080 sent this request (Origin)' },
  'not-found': { detail: 'no stock item for book 0193a1b2-0000-7000-8000-000000000001' },
  'in-flight': {
    consumer: 'inventory.reserve-stock',
    messageId: 'order-1001-placed',
    retryAfterSeconds: 1,
    inboxRecord: '/inbox/inventory.reserve-stock/order-1001-placed',
  },
  'needs-reconciliation': {
    consumer: 'notifications.stock-reserved-email',
    messageId: 'order-1001-email',
    inboxRecord: '/inbox/notifications.stock-reserved-email/order-1001-email',
    reconcile: '/inbox/notifications.stock-reserved-email/order-1001-email/reconcile',
  },
  'lease-not-expired': {
    consumer: 'notifications.stock-reserved-email',
    messageId: 'order-1001-email',
    leaseUntil: '2025-01-01T12:00:30.000Z',
    retryAfterSeconds: 30,
  },
  'stock-below-reserved': { detail: '2 copies are reserved; onHand cannot be 1' },
  'idempotency-key-reused': {
    consumer: 'inventory.reserve-stock',
    messageId: 'order-1001-placed',
    storedFingerprint: '4c7f0b9e2d1a3c5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6',
    receivedFingerprint: '9e1d2c3b4a5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9',
    deadLetter: '/dead-letters/1',
    inboxRecord: '/inbox/inventory.reserve-stock/order-1001-placed',
  },
  'shutting-down': { retryAfterSeconds: 1 },
  'database-unavailable': { retryAfterSeconds: 2 },
};
