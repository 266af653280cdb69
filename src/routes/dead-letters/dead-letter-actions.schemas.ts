import { Type } from 'typebox';
import { RecordedMessageId } from '../../inbox/machinery.js';
import { ConsumerName } from '../../http/inbox-record.js';

export const Id = Type.String({ pattern: '^[0-9]{1,18}$', description: "The dead letter's id", examples: ['1'] });
export const IdParams = Type.Object({ id: Id }, { additionalProperties: false });
export const Reason = Type.String({ minLength: 1, maxLength: 100, pattern: '^[a-z0-9-]+$' });

/** Letters one group request handles at most: a replay runs them one after the other. */
export const GROUP_BATCH_MAX = 50;
export const GROUP_BATCH_DEFAULT = 10;

export const LetterSchema = Type.Object(
  {
    id: Type.String(),
    consumer: Type.String(),
    messageId: Type.String(),
    keySource: Type.String(),
    payload: Type.Unknown({ description: 'the message as received' }),
    reason: Type.String(),
    detail: Type.Union([Type.String(), Type.Null()]),
    receivedAt: Type.String({ format: 'date-time' }),
    replayable: Type.Boolean(),
    notReplayableBecause: Type.Union([Type.String(), Type.Null()], { description: 'why a replay would be refused again' }),
  },
  { additionalProperties: false },
);

/** What a search of letters answers with. */
export const LettersFound = Type.Object(
  { items: Type.Array(LetterSchema) },
  { additionalProperties: false, description: 'The dead letters found' },
);

export const GroupSchema = Type.Object(
  {
    consumer: Type.String(),
    reason: Type.String(),
    count: Type.Integer(),
    oldest: Type.String({ format: 'date-time' }),
    newest: Type.String({ format: 'date-time' }),
    lastId: Type.String({ description: 'pass as throughId to act on the group as it is now (later letters are left alone)' }),
    replayable: Type.Boolean(),
    notReplayableBecause: Type.Union([Type.String(), Type.Null()]),
  },
  { additionalProperties: false },
);

export const ReplayResultSchema = Type.Object(
  {
    result: Type.Union([Type.Literal('processed'), Type.Literal('duplicate'), Type.Literal('dead-lettered')], {
      description:
        'processed: it ran now (the letter is gone); duplicate: the key had been processed with this payload meanwhile (gone too); ' +
        'dead-lettered: the cause remains: a new letter says what it is now (deadLetter), and the old one is gone',
    }),
    consumer: Type.String(),
    messageId: Type.String(),
    outcome: Type.Optional(Type.Unknown({ description: 'the recorded outcome (processed or duplicate)' })),
    reason: Type.Optional(Type.String({ description: 'dead-lettered: why, now' })),
    detail: Type.Optional(Type.String()),
    deadLetter: Type.Optional(Type.String({ description: 'dead-lettered: the id of the new letter' })),
  },
  { additionalProperties: false },
);

export const GroupBody = Type.Object(
  {
    consumer: ConsumerName,
    reason: Reason,
    throughId: { ...Id, description: "the group's lastId as listed: letters recorded after it are left alone" },
    limit: Type.Optional(
      Type.Integer({ minimum: 1, maximum: GROUP_BATCH_MAX, default: GROUP_BATCH_DEFAULT, description: 'letters this request handles' }),
    ),
  },
  {
    additionalProperties: false,
    'x-examples': {
      batch: {
        summary: 'The next ten letters of a group',
        value: { consumer: 'inventory.reserve-stock', reason: 'delivery-limit', throughId: '42', limit: 10 },
      },
    },
  },
);

export const ItemResult = Type.Object(
  {
    id: Type.String(),
    result: Type.Union([Type.Literal('processed'), Type.Literal('duplicate'), Type.Literal('dead-lettered'), Type.Literal('discarded')]),
    reason: Type.Optional(Type.String()),
    detail: Type.Optional(Type.String()),
    deadLetter: Type.Optional(Type.String()),
  },
  { additionalProperties: false },
);

export const GroupProgress = Type.Object(
  {
    done: Type.Integer({ description: 'letters this request handled' }),
    remaining: Type.Integer({ description: 'letters of the group (up to throughId) still there: repeat the request until 0' }),
    items: Type.Array(ItemResult),
  },
  { additionalProperties: false },
);

export const SearchQuery = Type.Object(
  {
    messageId: { ...RecordedMessageId, description: "the key, exactly as recorded (a producer's: `<producer> <message id>`)" },
    consumer: Type.Optional({ ...ConsumerName, description: "only this consumer's letters" }),
  },
  { additionalProperties: false },
);

export const GroupLettersQuery = Type.Object(
  {
    consumer: { ...ConsumerName, description: "the group's consumer" },
    reason: { ...Reason, description: "the group's reason" },
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 200, default: 50, description: 'Letters to list, oldest first' })),
  },
  { additionalProperties: false },
);
