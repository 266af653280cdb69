import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { type DeadLetter, findDeadLetter, listDeadLetters } from '../../inbox/machinery.js';
import { adminGuard, adminSecurity } from '../../http/admin-guard.js';
import { pageSchema } from '../../http/page.js';
import { ADMIN_PROBLEMS, problemResponses, ProblemError } from '../../http/problem.js';
import { DeadLetterSchema, IdParams, ListQuery, PAGE_LIMIT } from './dead-letters.schemas.js';

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
