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

/** The problem types the inbox answers with, by slug: status and title (RFC 9457). */
export const INBOX_PROBLEMS = {
  'invalid-request': { status: 400, title: 'The request does not match the schema' },
  'missing-message-key': { status: 400, title: 'The message carries no idempotency key' },
  'invalid-message-key': { status: 400, title: 'The idempotency key is not valid' },
  'conflicting-message-keys': { status: 400, title: 'Two key sources disagree' },
  'in-flight': { status: 409, title: 'The message is being processed' },
  'needs-reconciliation': { status: 409, title: 'An earlier attempt did not record its outcome' },
  'idempotency-key-reused': { status: 422, title: 'The key was used before with a different payload' },
  'side-effect-not-performed': { status: 502, title: 'The side effect was refused or unreachable; nothing was done' },
  'side-effect-outcome-unknown': { status: 502, title: 'The side effect may have happened; the record stays in progress' },
  overloaded: { status: 503, title: 'Too many commands are waiting' },
} as const;

export type InboxProblemSlug = keyof typeof INBOX_PROBLEMS;

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
