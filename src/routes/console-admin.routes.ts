import { hostname } from 'node:os';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { ACTIVITY_SERIES, ActivitySampler, type ActivityPoint } from '../console/activity.js';
import {
  countStaleInProgress,
  deadLettersByReason,
  eventsCausedBy,
  pendingByBook,
  staleInProgress,
  type PendingBook,
} from '../console/console.repository.js';
import { retryOnceIfDeadlocked } from '../db/dialect.js';
import { downstreamKey, type InboxRecord, RecordedMessageId } from '../inbox/machinery.js';
import { eventToJson } from '../outbox/outbox-event.js';
import { pendingOutboxStats } from '../outbox/outbox.repository.js';
import { adminGuard, adminSecurity } from '../http/admin-guard.js';
import { ConsumerParam, InboxLinksSchema, inboxRecordToJson } from '../http/inbox-record.js';
import { ADMIN_PROBLEMS, problemResponses } from '../http/problem.js';

/**
 * Admin routes behind the operator console, as usable from a script: what needs a person, the last
 * minutes of traffic, stuck side effects, one key's events, the outbox by book and the relay of the
 * replica that answers.
 */

/** How often the activity plot gets a point, and how many are kept (15 minutes). */
const SAMPLE_INTERVAL_MS = 5000;
const SAMPLES_KEPT = 180;
/** With a relay running, an event pending longer than this is worth a look. */
const OUTBOX_ATTENTION_SECONDS = 60;
const STARTED_AT = new Date();

const DateTime = Type.String({ format: 'date-time' });
const NullableDateTime = Type.Union([DateTime, Type.Null()]);

const Replica = Type.Object(
  {
    id: Type.String({ description: 'hostname and process id of the replica that answered' }),
    hostname: Type.String(),
    pid: Type.Integer(),
    startedAt: DateTime,
  },
  { additionalProperties: false },
);

const ActivityPointSchema = Type.Object(
  {
    at: Type.String({ format: 'date-time', description: 'end of the interval' }),
    seconds: Type.Number({ description: 'length of the interval (the last point is the interval running now)' }),
    commands: Type.Object(Object.fromEntries(ACTIVITY_SERIES.map((s) => [s, Type.Integer()])), {
      additionalProperties: false,
      description:
        'commands in the interval (HTTP requests and AMQP deliveries): processed, duplicate, refused (key reused, in flight, ' +
        'needs reconciliation, bad input, dead-lettered), overloaded (503), failed (5xx), requeued (AMQP, retried later)',
    }),
    batches: Type.Integer({ description: 'group-commit transactions of several commands' }),
    batchedCommands: Type.Integer({ description: 'commands those transactions committed' }),
  },
  { additionalProperties: false },
);

const AttentionItem = Type.Object(
  {
    kind: Type.Union([
      Type.Literal('needs-reconciliation'),
      Type.Literal('dead-letters'),
      Type.Literal('outbox-stalled'),
      Type.Literal('relay-failing'),
    ]),
    count: Type.Integer(),
    text: Type.String(),
  },
  { additionalProperties: false },
);

const Overview = Type.Object(
  {
    generatedAt: DateTime,
    replica: Replica,
    attention: Type.Object(
      {
        needed: Type.Boolean({ description: 'true when something waits for a person' }),
        summary: Type.String({ description: 'one line saying so' }),
        items: Type.Array(AttentionItem),
      },
      { additionalProperties: false },
    ),
    activity: Type.Object(
      {
        intervalSeconds: Type.Number(),
        series: Type.Array(Type.String()),
        points: Type.Array(ActivityPointSchema, { description: "this replica's last minutes, oldest first" }),
      },
      { additionalProperties: false },
    ),
    outbox: Type.Object(
      {
        pending: Type.Integer(),
        oldestPendingAgeSeconds: Type.Union([Type.Number(), Type.Null()], { description: 'null when nothing is pending' }),
        relayConfigured: Type.Boolean({ description: 'false without AMQP_URL: events stay pending by design' }),
      },
      { additionalProperties: false },
    ),
    deadLetters: Type.Object(
      {
        total: Type.Integer(),
        byReason: Type.Array(Type.Object({ reason: Type.String(), count: Type.Integer() }, { additionalProperties: false })),
      },
      { additionalProperties: false },
    ),
    needsReconciliation: Type.Integer({ description: 'in-progress two-phase records past their lease' }),
  },
  { additionalProperties: false },
);

const StuckRecord = Type.Object(
  {
    consumer: Type.String(),
    messageId: Type.String(),
    receivedAt: DateTime,
    attempts: Type.Integer({ description: 'attempts at the side effect so far' }),
    leaseUntil: Type.Union([DateTime, Type.Null()], { description: 'when the last attempt stopped being presumed alive' }),
    downstreamKey: Type.String({ description: 'the Idempotency-Key the receiver (the email provider) was sent: look it up there' }),
    links: InboxLinksSchema,
  },
  { additionalProperties: false },
);

const EventSchema = Type.Object(
  {
    seq: Type.String(),
    id: Type.String({ format: 'uuid' }),
    type: Type.String(),
    orderingKey: Type.String({ description: 'the book id' }),
    data: Type.Unknown(),
    occurredAt: DateTime,
    publishedAt: Type.Union([DateTime, Type.Null()], { description: 'null: still pending' }),
    attempts: Type.Integer(),
    lastError: Type.Union([Type.String(), Type.Null()]),
  },
  { additionalProperties: false },
);

const PendingBookSchema = Type.Object(
  {
    bookId: Type.String(),
    pending: Type.Integer({ description: "the book's events not yet published" }),
    heldBehind: Type.Integer({ description: 'events waiting behind the oldest one: a book publishes in order' }),
    oldestOccurredAt: NullableDateTime,
    head: Type.Union([
      Type.Object(
        {
          seq: Type.String(),
          id: Type.String(),
          type: Type.String(),
          attempts: Type.Integer(),
          lastError: Type.Union([Type.String(), Type.Null()], { description: 'why its last publish failed (it holds the others back)' }),
          lastAttemptAt: NullableDateTime,
        },
        { additionalProperties: false },
      ),
      Type.Null(),
    ]),
  },
  { additionalProperties: false },
);

const RelaySchema = Type.Object(
  {
    replica: Replica,
    configured: Type.Boolean({ description: 'false without AMQP_URL: no relay runs here' }),
    running: Type.Boolean(),
    connected: Type.Boolean({ description: 'the publisher has a channel to the broker' }),
    consecutiveFailures: Type.Integer({ description: 'failed batches in a row (0: the last batch went through)' }),
    lastPublishedAt: NullableDateTime,
    lastFailureAt: NullableDateTime,
    lastError: Type.Union([Type.String(), Type.Null()]),
  },
  { additionalProperties: false },
);

const KeyParams = Type.Object(
  {
    consumer: ConsumerParam,
    messageId: {
      ...RecordedMessageId,
      description: "The message key as recorded, percent-encoded (a producer's: `<producer> <message id>`, %20 between them)",
      examples: ['order-1001-placed'],
    },
  },
  { additionalProperties: false },
);

const LimitQuery = Type.Object(
  { limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 500, default: 100, description: 'At most this many' })) },
  { additionalProperties: false },
);

function replica() {
  return { id: `${hostname()}:${process.pid}`, hostname: hostname(), pid: process.pid, startedAt: STARTED_AT.toISOString() };
}

function pointToApi(point: ActivityPoint) {
  return { ...point, at: point.at.toISOString(), seconds: Math.round(point.seconds * 1000) / 1000 };
}

function stuckToApi(record: InboxRecord) {
  return { ...inboxRecordToJson(record), downstreamKey: downstreamKey(record.consumer, record.messageId) };
}

function bookToApi(book: PendingBook) {
  return {
    bookId: book.bookId,
    pending: book.pending,
    heldBehind: Math.max(0, book.pending - 1),
    oldestOccurredAt: book.oldestOccurredAt?.toISOString() ?? null,
    head: book.head === null ? null : { ...book.head, lastAttemptAt: book.head.lastAttemptAt?.toISOString() ?? null },
  };
}

function plural(n: number, one: string, many: string): string {
  return `${n} ${n === 1 ? one : many}`;
}

/** Admin: the operator's overview and the views behind it. */
export async function consoleAdminRoutes(app: FastifyInstance): Promise<void> {
  const onRequest = adminGuard(app.config);
  const sampler = new ActivitySampler(app.metrics.registry, { keep: SAMPLES_KEPT, now: app.now });
  app.addHook('onReady', async () => sampler.start(SAMPLE_INTERVAL_MS));
  app.addHook('onClose', async () => sampler.stop());
  registerOverview(app, onRequest, sampler);
  registerNeedsReconciliation(app, onRequest);
  registerEventsOfInboxRecord(app, onRequest);
  registerPendingOutboxByBook(app, onRequest);
  registerRelayState(app, onRequest);
}

type AdminGuard = ReturnType<typeof adminGuard>;

/** The outbox relay of this replica as the API shows it. */
function relayState(app: FastifyInstance) {
  const relay = app.messaging.relay;
  const state = relay?.state;
  return {
    replica: replica(),
    configured: relay !== undefined,
    running: state?.running ?? false,
    connected: app.messaging.publisher?.ready ?? false,
    consecutiveFailures: state?.consecutiveFailures ?? 0,
    lastPublishedAt: state?.lastPublishedAt?.toISOString() ?? null,
    lastFailureAt: state?.lastFailureAt?.toISOString() ?? null,
    lastError: state?.lastError ?? null,
  };
}

/** GET /overview: what needs a person, the last minutes of commands, the outbox backlog and dead letters. */
function registerOverview(app: FastifyInstance, onRequest: AdminGuard, sampler: ActivitySampler): void {
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
    async () => overview(app, sampler),
  );
}

/** One thing that needs a person, as the overview lists it. */
interface AttentionItem {
  kind: 'needs-reconciliation' | 'dead-letters' | 'outbox-stalled' | 'relay-failing';
  count: number;
  text: string;
}

/** The overview: what needs a person now, and the figures behind it. */
async function overview(app: FastifyInstance, sampler: ActivitySampler) {
  const now = app.now();
  const [stale, byReason, outbox, points] = await Promise.all([
    retryOnceIfDeadlocked(() => countStaleInProgress(app.db, now)),
    deadLettersByReason(app.db),
    pendingOutboxStats(app.db),
    sampler.points(),
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

/** GET /inbox/needs-reconciliation: in-progress side effects past their lease. */
function registerNeedsReconciliation(app: FastifyInstance, onRequest: AdminGuard): void {
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  api.get(
    '/inbox/needs-reconciliation',
    {
      onRequest,
      schema: {
        operationId: 'listNeedsReconciliation',
        tags: ['inbox'],
        summary: 'In-progress side effects past their lease: each waits for a person to say whether it happened',
        description:
          'No attempt is working on these any more, and the receiver may or may not have acted. Ask the receiver about the ' +
          'downstreamKey, then POST the reconcile link: completed (it happened) or release (it did not; the next delivery runs it).',
        security: adminSecurity,
        querystring: LimitQuery,
        response: {
          200: Type.Object({ items: Type.Array(StuckRecord) }, { additionalProperties: false, description: 'Records past their lease' }),
          ...problemResponses('invalid-request', ...ADMIN_PROBLEMS),
        },
      },
    },
    async (request) => {
      const records = await retryOnceIfDeadlocked(() => staleInProgress(app.db, app.now(), request.query.limit ?? 100));
      return { items: records.map(stuckToApi) };
    },
  );
}

/** GET /inbox/{consumer}/{messageId}/events: the outbox events a message caused. */
function registerEventsOfInboxRecord(app: FastifyInstance, onRequest: AdminGuard): void {
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  api.get(
    '/inbox/:consumer/:messageId/events',
    {
      onRequest,
      schema: {
        operationId: 'listEventsOfInboxRecord',
        tags: ['inbox'],
        summary: 'The outbox events a message caused (published or pending), in order',
        security: adminSecurity,
        params: KeyParams,
        querystring: LimitQuery,
        response: {
          200: Type.Object({ items: Type.Array(EventSchema) }, { additionalProperties: false, description: "The key's outbox events" }),
          ...problemResponses('invalid-request', ...ADMIN_PROBLEMS),
        },
      },
    },
    async (request) => {
      const { consumer, messageId } = request.params;
      const events = await eventsCausedBy(app.db, consumer, messageId, request.query.limit ?? 100);
      return { items: events.map(eventToJson) };
    },
  );
}

/** GET /outbox/books: pending events by book. */
function registerPendingOutboxByBook(app: FastifyInstance, onRequest: AdminGuard): void {
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  api.get(
    '/outbox/books',
    {
      onRequest,
      schema: {
        operationId: 'listPendingOutboxByBook',
        tags: ['outbox'],
        summary: 'Pending events by book: how many, and the oldest one, which the others are held behind',
        description:
          "A book's events are published in order, so a book whose oldest event keeps failing (head.lastError) holds back " +
          'every later event of that book (heldBehind). Books with the oldest pending event first.',
        security: adminSecurity,
        querystring: LimitQuery,
        response: {
          200: Type.Object(
            { items: Type.Array(PendingBookSchema) },
            { additionalProperties: false, description: 'Pending events by book' },
          ),
          ...problemResponses('invalid-request', ...ADMIN_PROBLEMS),
        },
      },
    },
    async (request) => {
      const books = await pendingByBook(app.db, request.query.limit ?? 100);
      return { items: books.map(bookToApi) };
    },
  );
}

/** GET /outbox/relay: this replica's outbox relay. */
function registerRelayState(app: FastifyInstance, onRequest: AdminGuard): void {
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  api.get(
    '/outbox/relay',
    {
      onRequest,
      schema: {
        operationId: 'getRelayState',
        tags: ['outbox'],
        summary: 'The outbox relay of the replica that answers: running, connected, recent failures',
        description: 'Every replica runs a relay and answers for its own; ask each replica (replica.id says which one answered).',
        security: adminSecurity,
        response: { 200: { ...RelaySchema, description: "This replica's relay" }, ...problemResponses(...ADMIN_PROBLEMS) },
      },
    },
    async () => relayState(app),
  );
}
