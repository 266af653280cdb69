import { Type } from 'typebox';
import { InboxLinksSchema } from '../../http/inbox-record.js';
import { DateTime } from '../route-options.js';

export const StuckRecord = Type.Object(
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
