import { Type } from 'typebox';
import { DateTime, NullableDateTime } from '../route-options.js';

export const Replica = Type.Object(
  {
    id: Type.String({ description: 'hostname and process id of the replica that answered' }),
    hostname: Type.String(),
    pid: Type.Integer(),
    startedAt: DateTime,
  },
  { additionalProperties: false },
);

export const PendingBookSchema = Type.Object(
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

export const RelaySchema = Type.Object(
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
