import { createHash } from 'node:crypto';
import { isConnectionFailure } from '../../db/dialect.js';
import { isValidMessageId, scopeKey, type MessageKey } from '../../inbox/message-key.js';
import type { Logger } from './logger.js';

/** A message that can never succeed: dead-lettered, never requeued. */
export class PoisonMessage extends Error {
  override readonly name = 'PoisonMessage';
  constructor(
    readonly reason: string,
    message: string,
    readonly payload: unknown,
    readonly key?: MessageKey,
  ) {
    super(message);
  }
}

/** A poison message as the dead-letter table records it. */
export interface PoisonLetter {
  consumer: string;
  messageId: string;
  keySource: MessageKey['source'];
  payload: unknown;
  storedFingerprint: string;
  receivedFingerprint: string;
  reason: string;
  receivedAt: Date;
  detail: string;
}

/**
 * Writes a letter to the dead-letter table and resolves to its id. Rejects as the database does: a
 * connection failure (transient) or a payload it cannot store.
 */
export type DeadLetterSink = (letter: PoisonLetter) => Promise<string>;

export interface PoisonRecorder {
  deadLetters: DeadLetterSink;
  now: () => Date;
  log: Logger;
  /** The producer the queue's messages are from: letters carry keys of its key space. */
  scope?: string | undefined;
}

/** What the dead-letter table keeps of a body that is not usable JSON. */
export function rawPayload(content: Buffer): { base64: string; bytes: number } {
  return { base64: content.subarray(0, 64 * 1024).toString('base64'), bytes: content.length };
}

/** The body for the dead-letter table: the JSON as sent, or else its bytes. */
export function bodyOf(content: Buffer): unknown {
  try {
    return JSON.parse(content.toString('utf8')) as unknown;
  } catch {
    return rawPayload(content);
  }
}

/**
 * The key if it was resolved (already in the producer's key space), else whichever id the message carries
 * that could be one, in the key space the message would have been recorded in: a letter from a producer's
 * queue is found, and replayed, under `<producer> <id>`, never under the bare id another sender may own.
 */
function letterKey(poison: PoisonMessage, property: unknown, scope: string | undefined): MessageKey {
  if (poison.key !== undefined) return poison.key;
  const envelopeId = (poison.payload as { messageId?: unknown } | null)?.messageId;
  if (typeof envelopeId === 'string' && isValidMessageId(envelopeId)) return scopeKey(scope, { messageId: envelopeId, source: 'body' });
  if (typeof property === 'string' && isValidMessageId(property))
    return scopeKey(scope, { messageId: property, source: 'amqp-message-id' });
  return { messageId: '', source: 'amqp-message-id' };
}

/**
 * Records a poison message in the dead-letter table. A payload the database refuses (text it cannot
 * store) is recorded as base64 instead; a database outage is transient: it rejects, and the caller
 * requeues the message.
 */
export async function recordPoisonMessage(
  recorder: PoisonRecorder,
  consumer: string,
  content: Buffer,
  messageIdProperty: unknown,
  poison: PoisonMessage,
): Promise<void> {
  const { messageId, source } = letterKey(poison, messageIdProperty, recorder.scope);
  const letter: PoisonLetter = {
    consumer,
    messageId,
    keySource: source,
    payload: poison.payload,
    storedFingerprint: '',
    receivedFingerprint: createHash('sha256').update(content).digest('hex'),
    reason: poison.reason,
    receivedAt: recorder.now(),
    detail: poison.message,
  };
  let id: string;
  try {
    id = await recorder.deadLetters(letter);
  } catch (error) {
    if (isConnectionFailure(error)) throw error;
    id = await recorder.deadLetters({ ...letter, payload: rawPayload(content) }).catch((again: unknown) => {
      if (isConnectionFailure(again)) throw again;
      recorder.log.error({ err: again, consumer, messageId }, 'poison message could not be recorded in the dead-letter table');
      return '';
    });
  }
  recorder.log.warn({ consumer, messageId, reason: poison.reason, detail: poison.message, deadLetter: id }, 'poison message dead-lettered');
}
