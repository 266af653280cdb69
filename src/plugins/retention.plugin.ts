import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { pruneExpired, pruneSummary, type PruneResult } from '../retention.js';

export interface Retention {
  /** One retention run now: counts what it deleted in the metrics and logs it. */
  run(): Promise<PruneResult>;
}

declare module 'fastify' {
  interface FastifyInstance {
    retention: Retention;
  }
}

/**
 * Retention, run now by POST /inbox/prune and every INBOX_PRUNE_INTERVAL_MS in the background (0: never).
 * Every replica runs the job; the batches skip rows another replica holds, so they share the work.
 */
export const retention = fp(
  async (app: FastifyInstance) => {
    const { config } = app;
    const policy = {
      inboxRetentionDays: config.inboxRetentionDays,
      deadLetterRetentionDays: config.deadLetterRetentionDays,
      outboxRetentionDays: config.outboxRetentionDays,
      batchSize: config.inboxPruneBatchSize,
    };

    // Aborted when the app starts closing: a run in progress stops after its current batch.
    const closing = new AbortController();

    async function run(): Promise<PruneResult> {
      const result = await pruneExpired(app.db, app.now, policy, closing.signal);
      // The cache's TTL is below retention, so this only matters for a clock that jumped; it is cheap.
      app.duplicateCache.forgetCompletedBefore(result.inboxCutoff);
      app.metrics.recordPruned('inbox', result.inbox.deleted);
      app.metrics.recordPruned('dead_letters', result.deadLetters.deleted);
      app.metrics.recordPruned('outbox', result.outbox.deleted);
      const summary = pruneSummary(result);
      if (summary.inbox > 0 || summary.deadLetters > 0 || summary.outbox > 0) app.log.info(summary, 'retention: pruned');
      else app.log.debug(summary, 'retention: nothing to prune');
      return result;
    }
    app.decorate('retention', { run } satisfies Retention);

    const intervalMs = config.inboxPruneIntervalMs;
    let running: Promise<void> | undefined;
    const tick = () => {
      // Ticks that come while a run is still going are skipped, so runs never pile up.
      if (running !== undefined) return;
      running = run()
        .then(
          () => undefined,
          (error: unknown) => app.log.warn({ err: error }, 'retention: run failed; retrying at the next interval'),
        )
        .finally(() => {
          running = undefined;
        });
    };
    let timer: NodeJS.Timeout | undefined;
    app.addHook('onReady', async () => {
      if (intervalMs === 0) return;
      timer = setInterval(tick, intervalMs);
      // The job must never be what keeps a process alive that is otherwise done.
      timer.unref();
    });
    app.addHook('preClose', async () => {
      clearInterval(timer);
      closing.abort();
    });
    // Registered after the database's onClose hook, so it runs before it: the pool closes after the run.
    app.addHook('onClose', async () => {
      await running;
    });
  },
  { name: 'retention', dependencies: ['services', 'metrics'] },
);
