import { createHash } from 'node:crypto';
import { parseItem } from 'structured-headers';
import { isValidMessageId, MESSAGE_ID_MAX_LENGTH, type MessageKey } from './message-key.js';

/**
 * Where senders put a message's identity, and how each becomes one inbox key.
 * HTTP-agnostic: it reads a header map and the parsed body the route has already validated.
 */

/** Where a message's identity came from, for the transports this module reads. */
export type KeySource = 'body' | 'idempotency-key' | 'cloudevents' | 'standard-webhooks' | 'amqp-message-id';

export const KEY_SOURCES: readonly KeySource[] = ['body', 'idempotency-key', 'cloudevents', 'standard-webhooks', 'amqp-message-id'];

export type KeySourceFailure = 'missing' | 'invalid' | 'conflict';

export class KeySourceError extends Error {
  override readonly name = 'KeySourceError';
  constructor(
    readonly failure: KeySourceFailure,
    message: string,
  ) {
    super(message);
  }
}

export type Headers = Record<string, string | string[] | undefined>;

function header(headers: Headers, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value.join(', ') : value;
}

/** The key candidates a request carries, before they are reconciled into one. */
export interface KeyCandidates {
  /** `messageId` of a JSON envelope. */
  body?: string | undefined;
  /** A CloudEvent's `source` and `id` (structured body or binary `ce-*` headers). */
  cloudEvent?: { source: string; id: string } | undefined;
  /** The `message-id` property of an AMQP message. */
  amqpMessageId?: string | undefined;
}

/**
 * Reads an Idempotency-Key header: a bare token, or an RFC 8941 structured-field string (`"abc"`).
 * A value that starts with a quote must parse as a structured string.
 */
export function parseIdempotencyKeyHeader(raw: string): string {
  const trimmed = raw.trim();
  if (!trimmed.startsWith('"')) return trimmed;
  try {
    // unknown: the library's BareItem names the DOM type BufferSource, which this project's libs do not declare.
    const value: unknown = parseItem(trimmed)[0];
    if (typeof value === 'string') return value;
  } catch {
    // fall through to the error below
  }
  throw new KeySourceError('invalid', 'the Idempotency-Key header is not a valid structured-field string');
}

/**
 * A CloudEvent is identified by source + id together. The key is `source|id` (`|` cannot appear in a
 * URI reference); when that would not fit the 200-character column or is not visible ASCII, the key
 * is `ce-sha256:` + the SHA-256 of the canonical JSON of [source, id]: deterministic and never truncated.
 */
export function cloudEventKey(source: string, id: string): string {
  const readable = `${source}|${id}`;
  if (!source.includes('|') && readable.length <= MESSAGE_ID_MAX_LENGTH && isValidMessageId(readable)) return readable;
  // JSON.stringify of two strings is their RFC 8785 canonical form, and unlike the canonicalize
  // package it takes a lone surrogate (escaped), which a CloudEvent's JSON may carry.
  return `ce-sha256:${createHash('sha256')
    .update(JSON.stringify([source, id]), 'utf8')
    .digest('hex')}`;
}

/** The form of a hashed CloudEvent key: no other source's id may take it (it would be another event's key). */
const HASHED_CLOUD_EVENT_KEY = /^ce-sha256:[0-9a-f]{64}$/;

/** Binary-mode CloudEvent attributes from `ce-*` headers, or undefined when there are none. */
export function binaryCloudEvent(headers: Headers): { source: string; id: string; type: string; specversion: string } | undefined {
  const id = header(headers, 'ce-id');
  const source = header(headers, 'ce-source');
  const specversion = header(headers, 'ce-specversion');
  const type = header(headers, 'ce-type');
  if (id === undefined && source === undefined && specversion === undefined && type === undefined) return undefined;
  if (!id || !source || !type || specversion !== '1.0') {
    throw new KeySourceError('invalid', 'a binary-mode CloudEvent needs ce-specversion: 1.0, ce-id, ce-source and ce-type headers');
  }
  return { id, source, type, specversion };
}

/**
 * Reconciles every key a request carries into one MessageKey.
 * None: missing. Two that differ: conflict. A value that is not 1-200 visible ASCII: invalid.
 * When several agree, the most specific source is recorded.
 */
export function resolveMessageKey(headers: Headers, candidates: KeyCandidates): MessageKey {
  const found: { source: KeySource; value: string }[] = [];
  const webhookId = header(headers, 'webhook-id');
  if (webhookId !== undefined) found.push({ source: 'standard-webhooks', value: webhookId.trim() });
  if (candidates.cloudEvent !== undefined) {
    found.push({ source: 'cloudevents', value: cloudEventKey(candidates.cloudEvent.source, candidates.cloudEvent.id) });
  }
  const idempotencyKey = header(headers, 'idempotency-key');
  if (idempotencyKey !== undefined) found.push({ source: 'idempotency-key', value: parseIdempotencyKeyHeader(idempotencyKey) });
  if (candidates.amqpMessageId !== undefined) found.push({ source: 'amqp-message-id', value: candidates.amqpMessageId });
  if (candidates.body !== undefined) found.push({ source: 'body', value: candidates.body });

  const first = found[0];
  if (first === undefined) {
    throw new KeySourceError(
      'missing',
      'no idempotency key: send "messageId" in the body, an Idempotency-Key header, a CloudEvent id, or a webhook-id header',
    );
  }
  for (const candidate of found) {
    if (!isValidMessageId(candidate.value)) {
      throw new KeySourceError('invalid', `the ${candidate.source} key must be 1-200 visible ASCII characters`);
    }
    // Beside a CloudEvent the form is the event's own key (any other value is a conflict below); alone,
    // it would spell some CloudEvent's key.
    if (candidate.source !== 'cloudevents' && candidates.cloudEvent === undefined && HASHED_CLOUD_EVENT_KEY.test(candidate.value)) {
      throw new KeySourceError(
        'invalid',
        `the ${candidate.source} key must not have the form ce-sha256:<64 hex>, which is reserved for the keys of CloudEvents whose source|id is too long`,
      );
    }
  }
  const disagreeing = found.find((c) => c.value !== first.value);
  if (disagreeing !== undefined) {
    throw new KeySourceError(
      'conflict',
      `the ${first.source} key "${first.value}" and the ${disagreeing.source} key "${disagreeing.value}" differ`,
    );
  }
  return { messageId: first.value, source: first.source };
}
