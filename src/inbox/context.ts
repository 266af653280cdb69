import type { SpanContext } from '@opentelemetry/api';
import type { FingerprintMismatchError } from './errors.js';
import type { InboxRecord } from './inbox.repository.js';
import type { MessageKey } from './message-key.js';
import type { InboxStore } from './store.js';

/** One delivery of a message to one consumer: its key, the data that defines it and that data's fingerprint. */
export interface Delivery {
  readonly consumer: string;
  readonly key: MessageKey;
  readonly fingerprint: string;
  /** What the sender sent, kept in the dead-letter table if the key turns out to be reused. */
  readonly payload: unknown;
  /** The span of this delivery's claim, while tracing: the group-commit transaction links to it. */
  readonly span?: SpanContext | undefined;
}

/** What the inbox answers for a delivery: processed by this call, or a duplicate replaying the first outcome. */
export type InboxResult<O> =
  | { readonly kind: 'processed'; readonly outcome: O; readonly record: InboxRecord }
  | { readonly kind: 'duplicate'; readonly outcome: O; readonly record: InboxRecord };

/** What every inbox mechanism works with: the store, the wait bound on a claim, the clock. */
export interface InboxContext {
  readonly store: InboxStore;
  /** How long a copy waits on another copy's uncommitted claim before it is told the message is in flight. */
  readonly lockTimeoutMs: number;
  readonly now: () => Date;
  /** Told about every payload mismatch (logging, metrics). */
  readonly onFingerprintMismatch?: ((error: FingerprintMismatchError) => void) | undefined;
}

/** Seconds to advertise in Retry-After for a wait of `waitMs`. */
export function retryAfterSeconds(waitMs: number): number {
  return Math.max(1, Math.ceil(waitMs / 1000));
}

/** The record a delivery just completed, as it now stands in the inbox. */
export function completedRecord(delivery: Delivery, receivedAt: Date, completedAt: Date, outcome: unknown, attempts: number): InboxRecord {
  return {
    messageId: delivery.key.messageId,
    consumer: delivery.consumer,
    keySource: delivery.key.source,
    fingerprint: delivery.fingerprint,
    receivedAt,
    completedAt,
    outcome,
    attempts,
    leaseUntil: null,
  };
}
