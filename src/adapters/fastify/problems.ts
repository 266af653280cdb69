import {
  FingerprintMismatchError,
  InboxError,
  InFlightError,
  NeedsReconciliationError,
  OverloadedError,
  SideEffectNotPerformedError,
  SideEffectOutcomeUnknownError,
} from '../../inbox/errors.js';
import { KeySourceError } from '../../inbox/key-sources.js';

/** A command request the route could not read (no body, a wrong envelope form): 400 invalid-request. */
export class CommandRequestError extends Error {
  override readonly name = 'CommandRequestError';
}

/** A problem type: the status it is sent with, its title, and what it means for whoever follows its `type` link. */
export interface ProblemType {
  readonly status: number;
  readonly title: string;
  readonly description: string;
}

/** How an OpenAPI problem response is published: its schema, the headers of a status, an example document. */
export interface ProblemResponseOptions<S extends string> {
  /** The body's schema (default: any object). */
  schema?: unknown;
  /** The headers sent with a status. */
  headers?: Readonly<Record<number, Readonly<Record<string, unknown>>>>;
  /** An example document of a type, published under its slug with its title as summary. */
  example?: (slug: S) => unknown;
}

/** Problem types by slug (RFC 9457): the inbox's, and an application's that extends them. */
export interface ProblemCatalogue<S extends string> {
  readonly types: { readonly [K in S]: ProblemType };
  /** Every slug, in the order the types were given. */
  readonly slugs: readonly S[];
  /** True when `slug` names a type of this catalogue. */
  has(slug: string): slug is S;
  /** This catalogue and `more`. A slug already here cannot be given again: one title per type. */
  extend<M extends string>(more: Record<M, ProblemType> & { readonly [K in S]?: never }): ProblemCatalogue<S | M>;
  /** The OpenAPI responses of a route that answers with `slugs`, one per status, as application/problem+json. */
  responses(slugs: readonly S[], options?: ProblemResponseOptions<S>): Record<number, unknown>;
}

export const PROBLEM_MEDIA_TYPE = 'application/problem+json';

/** A catalogue of `types`. */
export function defineProblems<S extends string>(types: Record<S, ProblemType>): ProblemCatalogue<S> {
  return {
    types,
    slugs: Object.keys(types) as S[],
    has: (slug): slug is S => Object.hasOwn(types, slug),
    extend: <M extends string>(more: Record<M, ProblemType>) => defineProblems<S | M>({ ...types, ...more }),
    responses: (slugs, options = {}) => problemResponses(types, slugs, options),
  };
}

function problemResponses<S extends string>(
  types: Record<S, ProblemType>,
  slugs: readonly S[],
  options: ProblemResponseOptions<S>,
): Record<number, unknown> {
  const byStatus = new Map<number, S[]>();
  for (const slug of slugs) {
    const list = byStatus.get(types[slug].status) ?? [];
    if (!list.includes(slug)) list.push(slug);
    byStatus.set(types[slug].status, list);
  }
  const responses: Record<number, unknown> = {};
  for (const [status, list] of [...byStatus].sort(([a], [b]) => a - b)) {
    const headers = options.headers?.[status];
    const { example } = options;
    const examples =
      example === undefined
        ? {}
        : { examples: Object.fromEntries(list.map((slug) => [slug, { summary: types[slug].title, value: example(slug) }])) };
    responses[status] = {
      description: `Problem details: ${list.join(', ')}`,
      ...(headers === undefined ? {} : { headers }),
      content: { [PROBLEM_MEDIA_TYPE]: { schema: options.schema ?? { type: 'object', additionalProperties: true }, ...examples } },
    };
  }
  return responses;
}

/** The problem types the inbox answers with. */
export const inboxProblems = defineProblems({
  'invalid-request': {
    status: 400,
    title: 'The request does not match the schema',
    description:
      'A field is missing, has the wrong type, is out of range, or is not allowed. Values are not coerced: "2" is not 2. ' +
      'Nothing was recorded.',
  },
  'missing-message-key': {
    status: 400,
    title: 'The message carries no idempotency key',
    description:
      'Send the key in exactly one place: the body "messageId", an Idempotency-Key header, a CloudEvent id (with its source), ' +
      'or a Standard Webhooks webhook-id header. Nothing was recorded.',
  },
  'invalid-message-key': {
    status: 400,
    title: 'The idempotency key is not valid',
    description: 'A key is 1 to 200 visible ASCII characters (no spaces or control characters). Nothing was recorded.',
  },
  'conflicting-message-keys': {
    status: 400,
    title: 'Two key sources disagree',
    description: 'The message carries keys in two places with different values. Send one, or the same value in both. Nothing was recorded.',
  },
  'in-flight': {
    status: 409,
    title: 'The same message is being processed right now',
    description: 'Another copy of this message holds the claim. Retry after the Retry-After delay: you will get the recorded outcome.',
  },
  'needs-reconciliation': {
    status: 409,
    title: 'An earlier attempt left its side effect unsettled',
    description:
      'A previous attempt started an external side effect and did not record how it ended. It will not be repeated blindly: an ' +
      'operator settles it through the reconcile endpoint.',
  },
  'idempotency-key-reused': {
    status: 422,
    title: 'The key was used before with a different payload',
    description:
      'Nothing was applied. The message was written to the dead-letter table; compare the two fingerprints and send a new key ' +
      'for a new command.',
  },
  'side-effect-not-performed': {
    status: 502,
    title: 'The side effect was refused or unreachable; nothing was done',
    description:
      "The side effect's receiver refused it or could not be reached: nothing was done and the claim was released, so a retry starts clean.",
  },
  'side-effect-outcome-unknown': {
    status: 502,
    title: 'The side effect may have happened; the record stays in progress',
    description:
      'The receiver answered with an error or not at all: the side effect may or may not have happened. The record stays in ' +
      'progress: the next copy performs it again when the receiver deduplicates, and is told needs-reconciliation otherwise.',
  },
  overloaded: {
    status: 503,
    title: 'The service is overloaded',
    description:
      'Too many commands are waiting for a transaction on this instance, or every database connection is busy and none came ' +
      'free in time. Nothing was recorded: retry after the Retry-After delay, or send it to another instance.',
  },
});

/** The inbox's problem types by slug: status, title and description. */
export const INBOX_PROBLEMS = inboxProblems.types;

export type InboxProblemSlug = (typeof inboxProblems.slugs)[number];

/** Where an application serves what a problem points at; each link is left out when not given. */
export interface ProblemLinks {
  /** The inbox record of a consumer's message (an operator route). */
  inboxRecord?: (consumer: string, messageId: string) => string;
  /** Where a half-done side effect is settled. */
  reconcile?: (consumer: string, messageId: string) => string;
  /** A dead letter. */
  deadLetter?: (id: string) => string;
}

/** An inbox refusal as a problem: its slug, the fields it adds and its headers. */
export interface InboxProblem {
  readonly slug: InboxProblemSlug;
  readonly detail: string;
  readonly fields: Readonly<Record<string, string | number>>;
  readonly headers: Readonly<Record<string, string>>;
}

/**
 * What a refusal of the inbox (errors.ts, a key source's failure, an unreadable command request) answers
 * over HTTP; undefined for any other error. The one mapping of inbox errors to problems: the plugin's own
 * error handler and an application's use it alike.
 */
export function inboxProblem(error: unknown, links: ProblemLinks = {}): InboxProblem | undefined {
  if (error instanceof CommandRequestError) return { slug: 'invalid-request', detail: error.message, fields: {}, headers: {} };
  if (error instanceof KeySourceError) {
    const slug = ({ missing: 'missing-message-key', invalid: 'invalid-message-key', conflict: 'conflicting-message-keys' } as const)[
      error.failure
    ];
    return { slug, detail: error.message, fields: {}, headers: {} };
  }
  if (!(error instanceof InboxError)) return undefined;
  const { consumer, messageId } = error;
  const record = links.inboxRecord?.(consumer, messageId);
  const about = { consumer, messageId, ...(record === undefined ? {} : { inboxRecord: record }) };
  if (error instanceof InFlightError) {
    const retry = { retryAfterSeconds: error.retryAfterSeconds };
    return {
      slug: 'in-flight',
      detail: error.message,
      fields: { ...about, ...retry },
      headers: { 'retry-after': String(error.retryAfterSeconds) },
    };
  }
  if (error instanceof OverloadedError) {
    const fields = { consumer, retryAfterSeconds: error.retryAfterSeconds };
    return { slug: 'overloaded', detail: error.message, fields, headers: { 'retry-after': String(error.retryAfterSeconds) } };
  }
  if (error instanceof NeedsReconciliationError) {
    const reconcile = links.reconcile?.(consumer, messageId);
    const detail = `${error.message} (started ${error.receivedAt.toISOString()})`;
    return { slug: 'needs-reconciliation', detail, fields: { ...about, ...(reconcile === undefined ? {} : { reconcile }) }, headers: {} };
  }
  if (error instanceof FingerprintMismatchError) {
    const deadLetter = links.deadLetter?.(error.deadLetterId);
    const fields = {
      consumer,
      messageId,
      storedFingerprint: error.storedFingerprint,
      receivedFingerprint: error.receivedFingerprint,
      ...(deadLetter === undefined ? {} : { deadLetter }),
      ...(record === undefined ? {} : { inboxRecord: record }),
    };
    return { slug: 'idempotency-key-reused', detail: error.message, fields, headers: {} };
  }
  if (error instanceof SideEffectNotPerformedError) {
    return {
      slug: 'side-effect-not-performed',
      detail: `${error.message}; nothing was done and the claim was released`,
      fields: {},
      headers: {},
    };
  }
  if (error instanceof SideEffectOutcomeUnknownError) {
    return { slug: 'side-effect-outcome-unknown', detail: `${error.message}; the record stays in progress`, fields: about, headers: {} };
  }
  return undefined;
}
