import { Type } from 'typebox';
import { KeySourceSchema, MESSAGE_ID_MAX_LENGTH, RECORDED_MESSAGE_ID_PATTERN } from '../../inbox/machinery.js';
import { ConsumerName, ConsumerParam, InboxLinksSchema } from '../../http/inbox-record.js';
import { instantSchema } from '../../http/page.js';

export const StateSchema = Type.Union([Type.Literal('in-progress'), Type.Literal('completed')]);

export const InboxRecordSchema = Type.Object(
  {
    consumer: Type.String(),
    messageId: Type.String(),
    state: StateSchema,
    keySource: KeySourceSchema,
    fingerprint: Type.String({ description: 'SHA-256 of the canonical JSON (RFC 8785) of the command data' }),
    receivedAt: Type.String({ format: 'date-time' }),
    completedAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
    leaseUntil: Type.Union([Type.String({ format: 'date-time' }), Type.Null()], {
      description: 'an in-progress side effect is presumed alive until then',
    }),
    attempts: Type.Integer(),
    outcome: Type.Unknown({ description: 'the recorded outcome; null while in progress' }),
    links: InboxLinksSchema,
  },
  { $id: 'InboxRecord', additionalProperties: false },
);

export const KeyParams = Type.Object(
  {
    consumer: ConsumerParam,
    // Every key the inbox records, and nothing else: a NUL would reach the database as a 500.
    messageId: Type.String({
      pattern: RECORDED_MESSAGE_ID_PATTERN,
      maxLength: MESSAGE_ID_MAX_LENGTH,
      description:
        "The message key as recorded, percent-encoded: the sender's message id, or for an authenticated producer " +
        '`<producer> <message id>` (a space between them, %20 in the path)',
      examples: ['order-1001-placed'],
    }),
  },
  { additionalProperties: false },
);

/** Records per page when the query names no limit (the validator fills it in). */
export const PAGE_LIMIT = 50;

export const ListQuery = Type.Object(
  {
    consumer: Type.Optional({ ...ConsumerName, description: "only this consumer's records" }),
    state: Type.Optional({ ...StateSchema, description: 'only records in this state' }),
    olderThan: Type.Optional(instantSchema('only records received before this time')),
    after: Type.Optional(Type.String({ maxLength: 1000, description: 'nextAfter of the previous page' })),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 500, default: PAGE_LIMIT, description: 'Records per page' })),
  },
  { additionalProperties: false },
);

export const ReconcileBody = Type.Object(
  {
    resolution: Type.Union([Type.Literal('completed'), Type.Literal('release')], {
      description: 'completed: the side effect happened, later copies get 200; release: it did not, the next delivery runs it (201)',
    }),
    note: Type.Optional(Type.String({ maxLength: 2000, description: 'Why, for the log' })),
  },
  {
    additionalProperties: false,
    'x-examples': {
      completed: {
        summary: 'The side effect happened',
        description: 'Only an in-progress record can be settled; a completed one answers 409 not-in-progress.',
        value: { resolution: 'completed', note: 'delivered per provider log' },
      },
      release: { summary: 'It did not happen: run it on the next delivery', value: { resolution: 'release', note: 'bounced' } },
    },
  },
);

export const InboxRecordRef = Type.Ref('InboxRecord');

/** What a reconcile answers: the resolution, and the record as it is now. */
export const ReconcileAnswer = Type.Object(
  { resolution: Type.String(), record: Type.Union([InboxRecordRef, Type.Null()], { description: 'null after a release' }) },
  { additionalProperties: false, description: 'Settled: the resolution, and the record as it is now' },
);
