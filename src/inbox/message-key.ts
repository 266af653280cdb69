/** Where a message's identity came from; recorded with the claim. */
export type KeySource = 'body' | 'idempotency-key' | 'cloudevents' | 'standard-webhooks' | 'amqp-message-id';

export const KEY_SOURCES: readonly KeySource[] = ['body', 'idempotency-key', 'cloudevents', 'standard-webhooks', 'amqp-message-id'];

/** The inbox key of one message for one consumer: `(messageId, consumer)` is unique. */
export interface MessageKey {
  readonly messageId: string;
  readonly source: KeySource;
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
