import { Type, type Static } from 'typebox';
import { ACTIVITY_SERIES } from '../../admin/activity.js';
import { Replica } from '../outbox/relay.schemas.js';
import { DateTime } from '../route-options.js';

export const ActivityPointSchema = Type.Object(
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

/** One thing that needs a person, as the overview lists it. */
export const AttentionItemSchema = Type.Object(
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

export type AttentionItem = Static<typeof AttentionItemSchema>;

export const Overview = Type.Object(
  {
    generatedAt: DateTime,
    replica: Replica,
    attention: Type.Object(
      {
        needed: Type.Boolean({ description: 'true when something waits for a person' }),
        summary: Type.String({ description: 'one line saying so' }),
        items: Type.Array(AttentionItemSchema),
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
