import type { FastifyBaseLogger } from 'fastify';
import type { Kysely } from 'kysely';
import type { Database } from '../schema/database.js';
import { errorMessage } from '../inbox/machinery.js';
import type { OutboxEvent } from './outbox-event.js';
import { claimPublishableEvents, markPublished, recordPublishFailure } from './outbox.repository.js';

/** How one event's publication ended: confirmed by the broker, or `error`. */
export interface PublishResult {
  id: string;
  error?: string;
}

/** The port the relay publishes through (RabbitMQ in src/messaging). */
export interface EventPublisher {
  /** False while there is no channel to publish on (broker down, reconnecting). */
  readonly ready: boolean;
  /**
   * Publishes the events in order and waits for the broker's confirms, at most timeoutMs; one result
   * per event. Rejects when nothing could be published at all (not connected).
   */
  publish(events: readonly OutboxEvent[], timeoutMs: number): Promise<PublishResult[]>;
}

export interface RelayOptions {
  db: Kysely<Database>;
  publisher: EventPublisher;
  log: FastifyBaseLogger;
  now: () => Date;
  batchSize: number;
  intervalMs: number;
  maxBackoffMs: number;
  /** Longest wait for the broker's confirms of one publish round (a batch publishes a book's events one round each). */
  publishTimeoutMs: number;
  /** Told how many events each batch published and how many failed. */
  onPublished?: (count: number) => void;
  onFailed?: (count: number) => void;
}

interface Failure {
  event: OutboxEvent;
  error: string;
}

/** What one batch's publication came to: the ids the broker confirmed, and the events it did not. */
interface BatchOutcome {
  confirmed: string[];
  failed: Failure[];
}

/** What a relay can say about itself: for the operator's view of each replica. */
export interface RelayState {
  running: boolean;
  consecutiveFailures: number;
  lastPublishedAt: Date | null;
  lastFailureAt: Date | null;
  lastError: string | null;
}

export class RelayUnavailableError extends Error {
  override readonly name = 'RelayUnavailableError';
}

/**
 * The outbox relay: pending events -> broker, at least once, never lost.
 *
 * One batch is one database transaction: claim the oldest publishable events (rows locked, skipped by
 * other replicas' relays), publish them, wait for the broker's confirms, mark the confirmed ones
 * published, commit. A crash or a lost connection anywhere before the commit rolls the marks back and
 * the events go again: a consumer may see an event twice (it deduplicates by message-id), never zero
 * times. Within a book the events go one round at a time, each after the confirm of the one before
 * (different books share each round's publish); an event the broker did not confirm holds back its
 * book's later events, which are not handed to the broker in that batch at all.
 *
 * It runs batch after batch while there is work, then waits for the interval or a wake-up (a command
 * committed events). While publishing fails it backs off exponentially, up to maxBackoffMs.
 */
export class OutboxRelay {
  #running: Promise<void> | undefined;
  #stopping = false;
  #wakeUp: (() => void) | undefined;
  #woken = false;
  #consecutiveFailures = 0;
  /** Whether the publisher has been connected once: before that, waiting for it is start-up, not a failure. */
  #publisherSeenReady = false;
  #lastPublishedAt: Date | null = null;
  /** The last failed batch; `startup` when it was the wait for a first connection, forgotten once connected. */
  #lastFailure: { at: Date; error: string; startup: boolean } | null = null;

  readonly #options: RelayOptions;

  constructor(options: RelayOptions) {
    this.#options = options;
  }

  /** Whether the loop runs, how it fared lately. */
  get state(): RelayState {
    return {
      running: this.#running !== undefined && !this.#stopping,
      consecutiveFailures: this.#consecutiveFailures,
      lastPublishedAt: this.#lastPublishedAt,
      lastFailureAt: this.#lastFailure?.at ?? null,
      lastError: this.#lastFailure?.error ?? null,
    };
  }

  /** Starts the loop in the background. */
  start(): void {
    if (this.#running !== undefined) return;
    this.#stopping = false;
    this.#running = this.#loop();
  }

  /** Cuts the current idle wait short: new events were committed. */
  wake(): void {
    this.#woken = true;
    this.#wakeUp?.();
  }

  /** Stops after the batch in progress (whose transaction commits or rolls back as usual). */
  async stop(): Promise<void> {
    this.#stopping = true;
    this.#wakeUp?.();
    await this.#running;
    this.#running = undefined;
  }

  /**
   * One batch: returns how many events it published. Throws RelayUnavailableError when the broker is
   * not reachable or a publish failed (the caller backs off).
   */
  async relayOnce(): Promise<number> {
    const { db, publisher, now } = this.#options;
    if (!publisher.ready) throw new RelayUnavailableError('not connected to the broker');
    this.#publisherSeenReady = true;
    let claimed: OutboxEvent[] = [];
    let outcome: BatchOutcome = { confirmed: [], failed: [] };
    try {
      await db.transaction().execute(async (trx) => {
        claimed = await claimPublishableEvents(trx, this.#options.batchSize);
        if (claimed.length === 0) return;
        outcome = await this.#publishInOrder(claimed);
        await markPublished(trx, outcome.confirmed, now());
      });
    } catch (error) {
      // Nothing of this batch is marked: all of it goes again.
      const reason = errorMessage(error);
      await this.#recordFailures(claimed.map((event) => ({ event, error: reason })));
      throw new RelayUnavailableError(`batch of ${claimed.length} not published: ${reason}`, { cause: error });
    }
    const { confirmed, failed } = outcome;
    this.#options.onPublished?.(confirmed.length);
    if (failed.length > 0) {
      await this.#recordFailures(failed);
      throw new RelayUnavailableError(`${failed.length} of ${claimed.length} events not confirmed: ${failed[0]!.error}`);
    }
    return confirmed.length;
  }

  /**
   * Publishes the claimed events in rounds: round r hands the broker the r-th event of every book still
   * going, all books at once, and waits for those confirms. A book stops at its first unconfirmed event,
   * so its later events are never handed to the broker before it: a confirm of e12 after a nack of e11
   * would let a consumer see e12, then e11 and e12 again from the next batch. A publish that rejects (no
   * channel) fails its round and ends the batch; what earlier rounds confirmed is still marked.
   */
  async #publishInOrder(claimed: readonly OutboxEvent[]): Promise<BatchOutcome> {
    const outcome: BatchOutcome = { confirmed: [], failed: [] };
    let going = booksInArrivalOrder(claimed);
    for (let round = 0; going.length > 0; round++) {
      const events = going.map((book) => book[round]!);
      let results: Map<string, PublishResult>;
      try {
        results = new Map((await this.#options.publisher.publish(events, this.#options.publishTimeoutMs)).map((r) => [r.id, r]));
      } catch (error) {
        outcome.failed.push(...events.map((event) => ({ event, error: errorMessage(error) })));
        break;
      }
      const stopped = new Set<string>();
      for (const event of events) {
        const result = results.get(event.id);
        const error = result === undefined ? 'no result' : result.error;
        if (error === undefined) {
          outcome.confirmed.push(event.id);
        } else {
          outcome.failed.push({ event, error });
          stopped.add(event.orderingKey);
        }
      }
      going = going.filter((book) => book.length > round + 1 && !stopped.has(book[0]!.orderingKey));
    }
    return outcome;
  }

  async #recordFailures(failed: readonly Failure[]): Promise<void> {
    if (failed.length === 0) return;
    this.#options.onFailed?.(failed.length);
    const byError = new Map<string, string[]>();
    for (const f of failed) byError.set(f.error, [...(byError.get(f.error) ?? []), f.event.id]);
    try {
      for (const [error, ids] of byError) await recordPublishFailure(this.#options.db, ids, error, this.#options.now());
    } catch (error) {
      this.#options.log.warn({ err: error }, 'outbox: could not record the failed publish attempt');
    }
  }

  async #loop(): Promise<void> {
    const { log } = this.#options;
    while (!this.#stopping) {
      let published: number;
      try {
        published = await this.relayOnce();
        if (published > 0) this.#lastPublishedAt = this.#options.now();
        if (this.#consecutiveFailures > 0) log.info({ afterFailures: this.#consecutiveFailures }, 'outbox relay: publishing again');
        this.#consecutiveFailures = 0;
        // Waiting for the broker at start-up was not a failure: once connected, nothing is left to report.
        if (this.#lastFailure?.startup === true) this.#lastFailure = null;
      } catch (error) {
        this.#consecutiveFailures++;
        this.#lastFailure = { at: this.#options.now(), error: errorMessage(error), startup: !this.#publisherSeenReady };
        const delay = this.#backoffMs();
        const starting = !this.#publisherSeenReady && this.#consecutiveFailures < 10;
        const level = !starting && (this.#consecutiveFailures === 1 || this.#consecutiveFailures % 10 === 0) ? 'warn' : 'debug';
        // The broker being away is expected and says everything in its message: no stack for it.
        const why = error instanceof RelayUnavailableError ? { reason: error.message } : { err: error };
        log[level]({ ...why, attempt: this.#consecutiveFailures, retryInMs: delay }, 'outbox relay: publishing failed; backing off');
        await this.#sleep(delay, false);
        continue;
      }
      // A batch that found work: there may be more right away. Otherwise wait for a wake-up or the interval.
      if (published === 0) await this.#sleep(this.#options.intervalMs, true);
    }
  }

  #backoffMs(): number {
    const base = Math.min(this.#options.maxBackoffMs, 100 * 2 ** Math.min(this.#consecutiveFailures, 20));
    return Math.round(base * (0.8 + Math.random() * 0.2));
  }

  /** Waits `ms`; a wake-up cuts it short only when `wakeable` (not while backing off), a stop always does. */
  #sleep(ms: number, wakeable: boolean): Promise<void> {
    if (this.#stopping) return Promise.resolve();
    if (wakeable && this.#woken) {
      this.#woken = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.#wakeUp = undefined;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.#wakeUp = () => {
        if (this.#stopping || wakeable) {
          this.#woken = false;
          done();
        }
      };
    });
  }
}

/** The events of each book (ordering key) in the order claimed, books in the order of their first event. */
function booksInArrivalOrder(events: readonly OutboxEvent[]): OutboxEvent[][] {
  const books = new Map<string, OutboxEvent[]>();
  for (const event of events) {
    const book = books.get(event.orderingKey);
    if (book === undefined) books.set(event.orderingKey, [event]);
    else book.push(event);
  }
  return [...books.values()];
}
