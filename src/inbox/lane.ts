/**
 * A batching lane: items queue, and up to `concurrency` runs take them in batches of at most `maxBatch`.
 * A run starts at the end of the event loop's turn in which its first item arrived, with everything
 * that arrived in that turn (no timer: at low load a batch is one item); items that arrive while every
 * run is busy queue, and the next free run takes everything queued. Past `queueLimit` queued items an
 * item is refused at once (the caller sheds it). A batch whose run fails as a whole is split in halves,
 * each run again as a batch, down to one item, so one bad item fails alone; a run never holds more than
 * one batch at a time. Nothing here knows what an item is.
 */

export interface LaneOptions {
  /** Most items one run takes; 1 turns batching off. */
  readonly maxBatch: number;
  /** Runs in flight at once. */
  readonly concurrency: number;
  /** Items that may wait; past it offer() refuses. */
  readonly queueLimit: number;
}

/**
 * Runs one batch: each item's result in the order given, settled one by one (an item may fail alone),
 * or a throw when the batch failed as a whole (it is then split).
 */
export type BatchRunner<I, R> = (batch: readonly I[]) => Promise<readonly PromiseSettledResult<R>[]>;

interface Queued<I, R> {
  readonly item: I;
  readonly resolve: (result: R) => void;
  readonly reject: (error: unknown) => void;
}

export class Lane<I, R> {
  readonly #run: BatchRunner<I, R>;
  readonly #options: LaneOptions;
  readonly #queue: Queued<I, R>[] = [];
  #running = 0;
  /** A pump is scheduled for the end of this turn of the event loop. */
  #scheduled = false;

  constructor(run: BatchRunner<I, R>, options: LaneOptions) {
    this.#run = run;
    this.#options = options;
  }

  /** Queues an item; its result once its batch ran, or undefined when the queue is full. */
  offer(item: I): Promise<R> | undefined {
    if (this.#queue.length >= this.#options.queueLimit) return undefined;
    const result = new Promise<R>((resolve, reject) => this.#queue.push({ item, resolve, reject }));
    this.#schedule();
    return result;
  }

  /** Items waiting for a run. */
  get queued(): number {
    return this.#queue.length;
  }

  /**
   * Starts the next runs once the current turn of the event loop is over, so that items that arrived
   * together (the deliveries of one read from a broker, the requests of one poll) share a batch instead
   * of the first of them taking a free run alone.
   */
  #schedule(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(() => {
      this.#scheduled = false;
      this.#pump();
    });
  }

  #pump(): void {
    while (this.#running < this.#options.concurrency && this.#queue.length > 0) {
      const batch = this.#queue.splice(0, this.#options.maxBatch);
      this.#running++;
      void this.#runSplitting(batch).finally(() => {
        this.#running--;
        this.#pump();
      });
    }
  }

  async #runSplitting(batch: Queued<I, R>[]): Promise<void> {
    let results: readonly PromiseSettledResult<R>[];
    try {
      results = await this.#run(batch.map((q) => q.item));
      if (results.length !== batch.length) throw new Error(`a batch of ${batch.length} gave ${results.length} results`);
    } catch (error) {
      if (batch.length === 1) {
        batch[0]!.reject(error);
        return;
      }
      // Each half again as a batch, one after the other: all at once, one bad item would take a run per item.
      const half = Math.ceil(batch.length / 2);
      await this.#runSplitting(batch.slice(0, half));
      await this.#runSplitting(batch.slice(half));
      return;
    }
    results.forEach((result, i) => {
      if (result.status === 'fulfilled') batch[i]!.resolve(result.value);
      else batch[i]!.reject(result.reason);
    });
  }
}

/** A promise's outcome as a settled result, never a rejection. */
export function settle<R>(promise: Promise<R>): Promise<PromiseSettledResult<R>> {
  return promise.then(
    (value) => ({ status: 'fulfilled', value }),
    (reason: unknown) => ({ status: 'rejected', reason }),
  );
}
