import { Type } from 'typebox';

export const PruneResult = Type.Object(
  {
    inbox: Type.Integer({ description: 'completed inbox records deleted (completed before inboxCutoff)' }),
    deadLetters: Type.Integer({ description: 'dead letters deleted (received before deadLetterCutoff)' }),
    outbox: Type.Integer({
      description: 'published outbox events deleted (published before outboxCutoff); pending events are never deleted',
    }),
    inboxCutoff: Type.String({ format: 'date-time', description: 'now - INBOX_RETENTION_DAYS' }),
    deadLetterCutoff: Type.String({ format: 'date-time', description: 'now - DEAD_LETTER_RETENTION_DAYS' }),
    outboxCutoff: Type.String({ format: 'date-time', description: 'now - OUTBOX_RETENTION_DAYS' }),
    complete: Type.Boolean({ description: 'false when the run stopped at its batch bound with rows still due: run it again' }),
  },
  { $id: 'PruneResult', additionalProperties: false },
);
