import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { type DeadLetter, findDeadLetter, KeySourceSchema, listDeadLetters } from '../inbox/machinery.js';
import { adminGuard, adminSecurity } from '../http/admin-guard.js';
import { ConsumerName } from '../http/inbox-record.js';
import { pageSchema } from '../http/page.js';
import { ADMIN_PROBLEMS, problemResponses, ProblemError } from '../http/problem.js';

const DeadLetterSchema = Type.Object(
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
const PAGE_LIMIT = 50;

const ListQuery = Type.Object(
  {
    consumer: Type.Optional({ ...ConsumerName, description: "only this consumer's dead letters" }),
    after: Type.Optional(Type.String({ pattern: '^[0-9]{1,18}$', description: 'nextAfter of the previous page' })),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 500, default: PAGE_LIMIT, description: 'Dead letters per page' })),
  },
  { additionalProperties: false },
);
const IdParams = Type.Object(
  { id: Type.String({ pattern: '^[0-9]{1,18}$', description: "The dead letter's id, as in a 422's deadLetter link", examples: ['1'] }) },
  { additionalProperties: false },
);

function toApi(letter: DeadLetter) {
  return { ...letter, receivedAt: letter.receivedAt.toISOString() };
}

/** Admin: the messages refused for reusing a key with another payload. */
export async function deadLetterRoutes(app: FastifyInstance): Promise<void> {
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  app.addSchema(DeadLetterSchema);
  const ref = Type.Ref('DeadLetter');
  const onRequest = adminGuard(app.config);

  api.get(
    '/dead-letters',
    {
      onRequest,
      schema: {
        operationId: 'listDeadLetters',
        tags: ['dead-letters'],
        summary: 'Dead letters, newest first (keyset-paged, filter by consumer)',
        security: adminSecurity,
        querystring: ListQuery,
        response: {
          200: pageSchema(ref),
          ...problemResponses('invalid-request', ...ADMIN_PROBLEMS),
        },
      },
    },
    async (request) => {
      const { consumer, after, limit = PAGE_LIMIT } = request.query;
      const page = await listDeadLetters(app.db, { consumer, after, limit });
      return { items: page.items.map(toApi), nextAfter: page.nextAfter };
    },
  );

  api.get(
    '/dead-letters/:id',
    {
      onRequest,
      schema: {
        operationId: 'getDeadLetter',
        tags: ['dead-letters'],
        summary: 'One dead letter',
        security: adminSecurity,
        params: IdParams,
        response: {
          200: { ...ref, description: 'The dead letter' },
          ...problemResponses('invalid-request', ...ADMIN_PROBLEMS, 'not-found'),
        },
      },
    },
    async (request) => {
      const { id } = request.params;
      const letter = await findDeadLetter(app.db, id);
      if (letter === undefined) throw new ProblemError('not-found', { detail: `no dead letter ${id}` });
      return toApi(letter);
    },
  );
}
