import { Type } from 'typebox';
import { RecordedMessageId } from '../../inbox/machinery.js';
import { ConsumerParam } from '../../http/inbox-record.js';
import { DateTime } from '../route-options.js';

export const EventSchema = Type.Object(
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

export const EventsKeyParams = Type.Object(
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
