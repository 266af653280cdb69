import { LRUCache } from 'lru-cache';
import type { InboxRecord } from './inbox.repository.js';

export interface DuplicateCacheOptions {
  /** Most records kept; 0 turns the cache off. */
  maxEntries: number;
  /**
   * How long after its completion a record may be answered from memory. Must be below the inbox
   * retention, so a cached record always still exists in the database (see README: the cache only
   * ever says what the database would say).
   */
  ttlMs: number;
  /** The service's clock, so expiry follows the same time as retention. */
  now: () => Date;
}

/**
 * Completed inbox records by key, for answering copies without a database round trip.
 * A completed record never changes until retention prunes it, and an entry expires `ttlMs` after the
 * record's completion (well before retention), so an answer from here is the one the database would
 * give. Only completed records enter: in-progress ones can still change.
 */
export class DuplicateCache {
  readonly #cache: LRUCache<string, InboxRecord> | undefined;
  readonly #ttlMs: number;
  readonly #now: () => Date;

  constructor(options: DuplicateCacheOptions) {
    this.#ttlMs = options.ttlMs;
    this.#now = options.now;
    this.#cache =
      options.maxEntries > 0 && options.ttlMs > 0
        ? new LRUCache<string, InboxRecord>({
            max: options.maxEntries,
            ttl: options.ttlMs,
            // Staleness is judged on the service's clock at every read, never on a cached timer value.
            ttlResolution: 0,
            perf: { now: () => options.now().getTime() },
          })
        : undefined;
  }

  /** The completed record of a key, if it is held and not yet expired. */
  get(consumer: string, messageId: string): InboxRecord | undefined {
    return this.#cache?.get(cacheKey(consumer, messageId));
  }

  /** Remembers a completed record until `ttlMs` after its completion. */
  remember(record: InboxRecord): void {
    if (this.#cache === undefined || record.completedAt === null) return;
    const remaining = record.completedAt.getTime() + this.#ttlMs - this.#now().getTime();
    if (remaining <= 0) return;
    this.#cache.set(cacheKey(record.consumer, record.messageId), record, { ttl: remaining });
  }

  /** Forgets every record completed before `cutoff` (retention is about to delete or has deleted them). */
  forgetCompletedBefore(cutoff: Date): void {
    if (this.#cache === undefined) return;
    const limit = cutoff.getTime();
    for (const [key, record] of this.#cache.entries()) {
      if (record.completedAt !== null && record.completedAt.getTime() < limit) this.#cache.delete(key);
    }
  }

  /** Records held (for metrics). */
  get size(): number {
    return this.#cache?.size ?? 0;
  }
}

function cacheKey(consumer: string, messageId: string): string {
  // A consumer name never contains a NUL, so the pair maps to one string unambiguously.
  return `${consumer}\u0000${messageId}`;
}
