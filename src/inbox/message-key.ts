import { createHash } from 'node:crypto';

/** The inbox key of one message for one consumer: `(messageId, consumer)` is unique. */
export interface MessageKey {
  readonly messageId: string;
  /** Where the sender put the identity (key-sources.ts names the transports' sources); recorded with the claim. */
  readonly source: string;
}

/** 1-200 visible ASCII characters: what the inbox column holds, on every database. */
export const MESSAGE_ID_PATTERN = '^[\\x21-\\x7E]{1,200}$';
export const MESSAGE_ID_MAX_LENGTH = 200;
const messageIdRegex = new RegExp(MESSAGE_ID_PATTERN);

/** True when the value can be stored as an inbox key as is. */
export function isValidMessageId(value: string): boolean {
  return messageIdRegex.test(value);
}

/**
 * What a consumer name may be when a client names one (a path or query parameter, a cursor): visible
 * ASCII that fits the column. Anything else (a NUL, a control character) names no consumer, and
 * PostgreSQL would refuse the NUL outright (22021).
 */
export const CONSUMER_NAME_PATTERN = '^[\\x21-\\x7E]{1,100}$';
const consumerNameRegex = new RegExp(CONSUMER_NAME_PATTERN);

/** True when the value can name a consumer. */
export function isValidConsumerName(value: string): boolean {
  return consumerNameRegex.test(value);
}

/**
 * A producer's id: lower-case letters, digits, `.`, `_`, `-`, at most 32. No space, so the scoped key
 * below is unambiguous.
 */
export const PRODUCER_ID_PATTERN = '^[a-z0-9][a-z0-9._-]{0,31}$';
const producerIdRegex = new RegExp(PRODUCER_ID_PATTERN);

/** True when the value can name a producer. */
export function isValidProducerId(value: string): boolean {
  return producerIdRegex.test(value);
}

/** How a message id that cannot be recorded as it is appears inside a producer's key space: `sha256:<64 hex>`. */
export const HASHED_ID_PREFIX = 'sha256:';

/**
 * The key recorded for a producer's message: `<producer> <messageId>`. A message id is visible ASCII and
 * never holds a space, so a scoped key can equal neither an unscoped one nor another producer's. When
 * that would not fit the 200-character column, the message id part is `sha256:` + the SHA-256 of the
 * message id: deterministic, never truncated, and still inside the producer's own part of the key space.
 * A message id that itself starts with `sha256:` is hashed the same way, so no literal id can take the
 * form of another id's hash: the mapping from ids to keys is one-to-one.
 */
export function scopedMessageId(producer: string, messageId: string): string {
  const scoped = `${producer} ${messageId}`;
  if (scoped.length <= MESSAGE_ID_MAX_LENGTH && !messageId.startsWith(HASHED_ID_PREFIX)) return scoped;
  return `${producer} ${HASHED_ID_PREFIX}${createHash('sha256').update(messageId, 'utf8').digest('hex')}`;
}

/** The producer whose key space a recorded key is in, or undefined for an unscoped key. */
export function producerOfKey(recorded: string): string | undefined {
  const space = recorded.indexOf(' ');
  return space === -1 ? undefined : recorded.slice(0, space);
}

/** True when two recorded keys are in the same key space (one producer's, or both unscoped). */
export function sameKeySpace(a: string, b: string): boolean {
  return producerOfKey(a) === producerOfKey(b);
}

/** The key as the inbox records it: unchanged without a producer scope, scoped with one. */
export function scopeKey(scope: string | undefined, key: MessageKey): MessageKey {
  return scope === undefined ? key : { messageId: scopedMessageId(scope, key.messageId), source: key.source };
}

/** A key as recorded: a message id, or `<producer> <message id>` (admin routes address both). */
export const RECORDED_MESSAGE_ID_PATTERN = '^(?:[a-z0-9][a-z0-9._-]{0,31} )?[\\x21-\\x7E]{1,200}$';
const recordedMessageIdRegex = new RegExp(RECORDED_MESSAGE_ID_PATTERN);

/** True when the value can be a recorded key, scoped or not. */
export function isRecordedMessageId(value: string): boolean {
  return value.length <= MESSAGE_ID_MAX_LENGTH && recordedMessageIdRegex.test(value);
}
