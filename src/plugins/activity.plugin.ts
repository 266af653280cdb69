import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { ActivitySampler } from '../admin/activity.js';

/** How often the activity plot gets a point, and how many are kept (15 minutes). */
export const SAMPLE_INTERVAL_MS = 5000;
export const SAMPLES_KEPT = 180;

declare module 'fastify' {
  interface FastifyInstance {
    /** The last minutes of command traffic of this replica, sampled from the metrics plugin's counters. */
    activity: ActivitySampler;
  }
}

/** Samples the command counters every SAMPLE_INTERVAL_MS while the app runs, for the overview's plot. */
export const activity = fp(
  async (app: FastifyInstance) => {
    const sampler = new ActivitySampler(app.metrics.registry, { keep: SAMPLES_KEPT, now: app.now });
    app.decorate('activity', sampler);
    app.addHook('onReady', async () => sampler.start(SAMPLE_INTERVAL_MS));
    app.addHook('onClose', async () => sampler.stop());
  },
  { name: 'activity', dependencies: ['metrics'] },
);
