import type { Registry } from 'prom-client';

/**
 * The last minutes of command traffic, in memory, for the console's plots: every interval the sampler
 * reads the metrics plugin's counters (commands by result, AMQP deliveries by settlement, the batch-size
 * histogram) and keeps the difference. Nothing on the request path: a sample is a few map reads.
 * Each replica samples its own counters, as /metrics counts its own requests.
 */

/** The series the console plots, each a sum of counter results (see SERIES_OF). */
export const ACTIVITY_SERIES = ['processed', 'duplicate', 'refused', 'overloaded', 'failed', 'requeued'] as const;
export type ActivitySeries = (typeof ACTIVITY_SERIES)[number];

/** inbox_commands_total results (HTTP) and amqp_command_deliveries_total settlements (AMQP), by series. */
const SERIES_OF: Record<string, ActivitySeries> = {
  processed: 'processed',
  duplicate: 'duplicate',
  'fingerprint-mismatch': 'refused',
  'in-flight': 'refused',
  'needs-reconciliation': 'refused',
  rejected: 'refused',
  'dead-lettered': 'refused',
  overloaded: 'overloaded',
  // A 503 counted apart in the metric since alerts tell it from a fault; plotted with the 5xx, as before.
  'database-busy': 'failed',
  failed: 'failed',
  requeued: 'requeued',
};

export interface ActivityPoint {
  /** End of the interval. */
  at: Date;
  /** Length of the interval. */
  seconds: number;
  /** Commands in the interval, by series. */
  commands: Record<ActivitySeries, number>;
  /** Group-commit transactions of several commands, and the commands they committed. */
  batches: number;
  batchedCommands: number;
}

interface Totals {
  commands: Record<ActivitySeries, number>;
  batches: number;
  batchedCommands: number;
}

function zero(): Record<ActivitySeries, number> {
  return Object.fromEntries(ACTIVITY_SERIES.map((s) => [s, 0])) as Record<ActivitySeries, number>;
}

export class ActivitySampler {
  readonly #registry: Registry;
  readonly #keep: number;
  readonly #now: () => Date;
  readonly #points: ActivityPoint[] = [];
  #last: { at: Date; totals: Totals } | undefined;
  #timer: NodeJS.Timeout | undefined;

  constructor(registry: Registry, options: { keep: number; now: () => Date }) {
    this.#registry = registry;
    this.#keep = options.keep;
    this.#now = options.now;
  }

  /** Takes the baseline now and a sample every intervalMs (the timer does not hold the process open). */
  async start(intervalMs: number): Promise<void> {
    this.#last = { at: this.#now(), totals: await this.#totals() };
    this.#timer = setInterval(() => void this.sample().catch(() => {}), intervalMs);
    this.#timer.unref();
  }

  stop(): void {
    clearInterval(this.#timer);
  }

  /** Closes an interval: the counters' growth since the previous sample becomes a point. */
  async sample(): Promise<void> {
    const point = await this.#sinceLast();
    if (point === undefined) return;
    this.#points.push(point.point);
    if (this.#points.length > this.#keep) this.#points.splice(0, this.#points.length - this.#keep);
    this.#last = { at: point.point.at, totals: point.totals };
  }

  /** The kept points, then the interval running now (since the last sample). */
  async points(): Promise<ActivityPoint[]> {
    const current = await this.#sinceLast();
    return current === undefined ? [...this.#points] : [...this.#points, current.point];
  }

  async #sinceLast(): Promise<{ point: ActivityPoint; totals: Totals } | undefined> {
    const last = this.#last;
    if (last === undefined) return undefined;
    const totals = await this.#totals();
    const at = this.#now();
    const commands = zero();
    for (const series of ACTIVITY_SERIES) commands[series] = Math.max(0, totals.commands[series] - last.totals.commands[series]);
    return {
      totals,
      point: {
        at,
        seconds: Math.max(0, (at.getTime() - last.at.getTime()) / 1000),
        commands,
        batches: Math.max(0, totals.batches - last.totals.batches),
        batchedCommands: Math.max(0, totals.batchedCommands - last.totals.batchedCommands),
      },
    };
  }

  async #totals(): Promise<Totals> {
    const commands = zero();
    for (const [name, label] of [
      ['inbox_commands_total', 'result'],
      ['amqp_command_deliveries_total', 'result'],
    ] as const) {
      const metric = this.#registry.getSingleMetric(name);
      if (metric === undefined) continue;
      for (const value of (await metric.get()).values) {
        const series = SERIES_OF[String(value.labels[label])];
        if (series !== undefined) commands[series] += value.value;
      }
    }
    let batches = 0;
    let batchedCommands = 0;
    const histogram = this.#registry.getSingleMetric('inbox_batch_size');
    if (histogram !== undefined) {
      for (const value of (await histogram.get()).values) {
        const name = (value as { metricName?: string }).metricName;
        if (name === 'inbox_batch_size_count') batches += value.value;
        else if (name === 'inbox_batch_size_sum') batchedCommands += value.value;
      }
    }
    return { commands, batches, batchedCommands };
  }
}
