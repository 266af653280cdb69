import { Type } from 'typebox';
import { KeySourceSchema } from '../../inbox/machinery.js';
import { ConsumerName } from '../../http/inbox-record.js';

export const DeadLetterSchema = Type.Object(
  {
    id: Type.String(),
    consumer: Type.String(),
    messageId: Type.String(),
    keySource: KeySourceSchema,
    payload: Type.Unknown({ description: 'the command data as received' }),
    storedFingerprint: Type.String({ description: 'fingerprint recorded by the first processing' }),
    receivedFingerprint: Type.String({ description: 'fingerprint of the refused copy' }),
    reason: Type.String(),
    receivedAt: Type.String({ format: 'date-time' }),
    detail: Type.Union([Type.String(), Type.Null()], {
      description: 'why, in words: the schema errors of a refused body, the last error of a command that failed on every delivery',
    }),
  },
  { $id: 'DeadLetter', additionalProperties: false },
);

/** Dead letters per page when the query names no limit (the validator fills it in). */
export const PAGE_LIMIT = 50;

export const ListQuery = Type.Object(
  {
    consumer: Type.Optional({ ...ConsumerName, description: "only this consumer's dead letters" }),
    after: Type.Optional(Type.String({ pattern: '^[0-9]{1,18}$', description: 'nextAfter of the previous page' })),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 500, default: PAGE_LIMIT, description: 'Dead letters per page' })),
  },
  { additionalProperties: false },
);
export const IdParams = Type.Object(
  { id: Type.String({ pattern: '^[0-9]{1,18}$', description: "The dead letter's id, as in a 422's deadLetter link", examples: ['1'] }) },
  { additionalProperties: false },
);
