import { Type } from 'typebox';
import { CONSUMER_NAME_PATTERN, type InboxRecord } from '../inbox/machinery.js';
import { inboxPath } from './error-handler.js';

/** The inbox records and the consumers they belong to, as the admin routes name and show them. */

/** A consumer's name, as a query or a path names it: each use adds its own description. */
export const ConsumerName = Type.String({ pattern: CONSUMER_NAME_PATTERN, minLength: 1, maxLength: 100 });

/** The consumer of an inbox record's key, as a path names it. */
export const ConsumerParam = {
  ...ConsumerName,
  description: 'The consumer, e.g. inventory.reserve-stock',
  examples: ['inventory.reserve-stock'],
};

/** Where an inbox record is read, and where an operator settles it. */
export const InboxLinksSchema = Type.Object({ self: Type.String(), reconcile: Type.String() }, { additionalProperties: false });

/**
 * An inbox record as the admin routes answer with it: its state, times as RFC 3339 strings and links.
 * Each route's response schema says which of its fields that route shows; the serializer writes no other.
 */
export function inboxRecordToJson(record: InboxRecord) {
  const self = inboxPath(record.consumer, record.messageId);
  return {
    consumer: record.consumer,
    messageId: record.messageId,
    state: record.completedAt === null ? ('in-progress' as const) : ('completed' as const),
    keySource: record.keySource,
    fingerprint: record.fingerprint,
    receivedAt: record.receivedAt.toISOString(),
    completedAt: record.completedAt?.toISOString() ?? null,
    leaseUntil: record.leaseUntil?.toISOString() ?? null,
    attempts: record.attempts,
    outcome: record.outcome,
    links: { self, reconcile: `${self}/reconcile` },
  };
}
