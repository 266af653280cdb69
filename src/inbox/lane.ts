/**
 * A batching lane: items queue, and up to `concurrency` runs take them in batches of at most `maxBatch`.
 * A run starts at the end of the event loop's turn in which its first item arrived, with everything
 * that arrived in that turn (no timer: at low load a batch is one item); items that arrive while every
 * run is busy queue, and the next free run takes everything queued. While a run is in flight, another
 * starts beside it only with at least as many items as the smallest run in flight holds, or once the
 * first of them has waited `balanceWaitMs`: a run costs about the same whatever it carries, so under
 * load the runs stay full instead of a small one starting beside each full one (at low load the one run
 * in flight is small, and so is what starts beside it). Past `queueLimit` queued items an item is
 * refused at once (the caller sheds it). A batch whose run fails as a whole is split in halves, each run
 * again as a batch, down to one item, so one bad item fails alone; a run never holds more than one batch
 * at a time. Nothing here knows what an item is.
 */

export interface LaneOptions {
  /** Most items one run takes; 1 turns batching off. */
  readonly maxBatch: number;
  /** Runs in flight at once. */
  readonly concurrency: number;
  /** Items that may wait; past it offer() refuses. */
  readonly queueLimit: number;
  /**
   * How long queued items may wait for a run in flight instead of starting a smaller one beside it
   * (milliseconds; 0: a free run starts with whatever is queued).
   */
  readonly balanceWaitMs?: number;
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
  /** When it was queued (performance.now()). */
  readonly at: number;
}

export class Lane<I, R> {
  readonly #run: BatchRunner<I, R>;
  readonly #options: LaneOptions;
  readonly #queue: Queued<I, R>[] = [];
  /** The size of each batch in flight. */
  readonly #running: number[] = [];
  /** A pump is scheduled for the end of this turn of the event loop. */
  #scheduled = false;
  /** A pump is scheduled for when the first queued item has waited balanceWaitMs. */
  #balanceTimer: NodeJS.Timeout | undefined;

  constructor(run: BatchRunner<I, R>, options: LaneOptions) {
    this.#run = run;
    this.#options = options;
  }

  /** Queues an item; its result once its batch ran, or undefined when the queue is full. */
  offer(item: I): Promise<R> | undefined {
    if (this.#queue.length >= this.#options.queueLimit) return undefined;
    const result = new Promise<R>((resolve, reject) => this.#queue.push({ item, resolve, reject, at: performance.now() }));
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
    const { concurrency, maxBatch } = this.#options;
    while (this.#running.length < concurrency && this.#queue.length > 0) {
      if (this.#waitForRunInFlight()) return;
      const batch = this.#queue.splice(0, maxBatch);
      this.#running.push(batch.length);
      void this.#runSplitting(batch).finally(() => {
        this.#running.splice(this.#running.indexOf(batch.length), 1);
        this.#pump();
      });
    }
  }

  /**
   * Whether the queued items should wait for a run in flight rather than start a smaller one beside it;
   * if so, a pump is scheduled for when the first of them has waited balanceWaitMs.
   */
  #waitForRunInFlight(): boolean {
    const waitMs = this.#options.balanceWaitMs ?? 0;
    if (waitMs <= 0 || this.#running.length === 0) return false;
    if (this.#queue.length >= Math.min(this.#options.maxBatch, ...this.#running)) return false;
    const waitedMs = performance.now() - this.#queue[0]!.at;
    if (waitedMs >= waitMs) return false;
    if (this.#balanceTimer === undefined) {
      this.#balanceTimer = setTimeout(() => {
        this.#balanceTimer = undefined;
        this.#pump();
      }, waitMs - waitedMs);
      // A wait for a batch must not keep a process alive that has nothing else to do.
      this.#balanceTimer.unref();
    }
    return true;
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
