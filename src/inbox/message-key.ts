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

/**
 * The key recorded for a producer's message: `<producer> <messageId>`. A message id is visible ASCII and
 * never holds a space, so a scoped key can equal neither an unscoped one nor another producer's. When
 * that would not fit the 200-character column, the message id part is `sha256:` + the SHA-256 of the
 * message id: deterministic, never truncated, and still inside the producer's own part of the key space.
 */
export function scopedMessageId(producer: string, messageId: string): string {
  const scoped = `${producer} ${messageId}`;
  if (scoped.length <= MESSAGE_ID_MAX_LENGTH) return scoped;
  return `${producer} sha256:${createHash('sha256').update(messageId, 'utf8').digest('hex')}`;
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
