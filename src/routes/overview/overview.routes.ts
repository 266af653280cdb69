import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { ACTIVITY_SERIES, type ActivityPoint } from '../../admin/activity.js';
import { countStaleInProgress, deadLettersByReason } from '../../admin/console.repository.js';
import { retryOnceIfDeadlocked } from '../../db/dialect.js';
import { pendingOutboxStats } from '../../outbox/outbox.repository.js';
import { adminGuard, adminSecurity } from '../../http/admin-guard.js';
import { ADMIN_PROBLEMS, problemResponses } from '../../http/problem.js';
import { SAMPLE_INTERVAL_MS, SAMPLES_KEPT } from '../../plugins/activity.plugin.js';
import { relayState } from '../outbox/relay.routes.js';
import type { AdminGuard } from '../route-options.js';
import { type AttentionItem, Overview } from './overview.schemas.js';

/**
 * Admin: the operator's overview, as usable from a script: what needs a person, the last minutes of
 * traffic (the activity plugin's samples), the outbox backlog and dead letters by reason.
 */

/** With a relay running, an event pending longer than this is worth a look. */
const OUTBOX_ATTENTION_SECONDS = 60;

function pointToApi(point: ActivityPoint) {
  return { ...point, at: point.at.toISOString(), seconds: Math.round(point.seconds * 1000) / 1000 };
}

function plural(n: number, one: string, many: string): string {
  return `${n} ${n === 1 ? one : many}`;
}

/** Admin: the operator's overview. */
export async function overviewRoutes(app: FastifyInstance): Promise<void> {
  registerOverview(app, adminGuard(app.config));
}

/** GET /overview: what needs a person, the last minutes of commands, the outbox backlog and dead letters. */
function registerOverview(app: FastifyInstance, onRequest: AdminGuard): void {
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  api.get(
    '/overview',
    {
      onRequest,
      schema: {
        operationId: 'getOverview',
        tags: ['operations'],
        summary: 'What needs a person, the last minutes of commands, outbox backlog and dead letters by reason',
        description:
          'attention.needed is true when an in-progress side effect has passed its lease (settle it: reconcile), dead letters wait ' +
          '(replay or discard them), or, with a relay running, the relay is failing or the oldest pending event is older than ' +
          `${OUTBOX_ATTENTION_SECONDS} s. activity holds the last ${(SAMPLES_KEPT * SAMPLE_INTERVAL_MS) / 60_000} minutes of the ` +
          `replica that answered, one point per ${SAMPLE_INTERVAL_MS / 1000} s, read from the counters behind /metrics.`,
        security: adminSecurity,
        response: { 200: { ...Overview, description: 'The overview' }, ...problemResponses(...ADMIN_PROBLEMS) },
      },
    },
    async () => overview(app),
  );
}

/** The overview: what needs a person now, and the figures behind it. */
async function overview(app: FastifyInstance) {
  const now = app.now();
  const [stale, byReason, outbox, points] = await Promise.all([
    retryOnceIfDeadlocked(() => countStaleInProgress(app.db, now)),
    deadLettersByReason(app.db),
    pendingOutboxStats(app.db),
    app.activity.points(),
  ]);
  const totalDead = byReason.reduce((sum, r) => sum + r.count, 0);
  const oldestAge = outbox.oldest === null ? null : Math.max(0, (now.getTime() - outbox.oldest.getTime()) / 1000);
  const relay = relayState(app);
  const items = attentionItems({ stale, totalDead, relay, pending: outbox.pending, oldestAge });
  return {
    generatedAt: now.toISOString(),
    replica: relay.replica,
    attention: {
      needed: items.length > 0,
      summary: items.length === 0 ? 'Nothing needs a person.' : `Needs a person: ${items.map((i) => i.text).join('; ')}.`,
      items,
    },
    activity: { intervalSeconds: SAMPLE_INTERVAL_MS / 1000, series: [...ACTIVITY_SERIES], points: points.map(pointToApi) },
    outbox: { pending: outbox.pending, oldestPendingAgeSeconds: oldestAge, relayConfigured: relay.configured },
    deadLetters: { total: totalDead, byReason },
    needsReconciliation: stale,
  };
}

/**
 * What needs a person: side effects to settle, dead letters, and, with a relay running, a relay that
 * keeps failing or an outbox whose oldest pending event is older than OUTBOX_ATTENTION_SECONDS.
 */
function attentionItems(figures: {
  stale: number;
  totalDead: number;
  relay: ReturnType<typeof relayState>;
  pending: number;
  oldestAge: number | null;
}): AttentionItem[] {
  const { stale, totalDead, relay, pending, oldestAge } = figures;
  const items: AttentionItem[] = [];
  if (stale > 0) {
    items.push({ kind: 'needs-reconciliation', count: stale, text: `${plural(stale, 'side effect', 'side effects')} to settle` });
  }
  if (totalDead > 0) items.push({ kind: 'dead-letters', count: totalDead, text: `${plural(totalDead, 'dead letter', 'dead letters')}` });
  if (relay.configured && relay.consecutiveFailures > 0) {
    items.push({
      kind: 'relay-failing',
      count: relay.consecutiveFailures,
      text: `the outbox relay failed ${plural(relay.consecutiveFailures, 'batch', 'batches')} in a row`,
    });
  }
  if (relay.configured && oldestAge !== null && oldestAge > OUTBOX_ATTENTION_SECONDS) {
    items.push({
      kind: 'outbox-stalled',
      count: pending,
      text: `${plural(pending, 'event', 'events')} pending, the oldest for ${Math.round(oldestAge)} s`,
    });
  }
  return items;
}
