import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { adminGuard, adminSecurity } from '../../http/admin-guard.js';
import { ADMIN_PROBLEMS, problemResponses, UNAVAILABLE_PROBLEMS } from '../../http/problem.js';
import { pruneSummary } from '../../retention.js';
import { PruneResult } from './prune.schemas.js';

/** Admin: run retention now. */
export async function pruneRoutes(app: FastifyInstance): Promise<void> {
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  app.addSchema(PruneResult);

  api.post(
    '/inbox/prune',
    {
      onRequest: adminGuard(app.config),
      schema: {
        operationId: 'pruneInbox',
        tags: ['inbox'],
        summary: 'Prune expired inbox records, dead letters and published outbox events now',
        description:
          'Deletes completed inbox records older than INBOX_RETENTION_DAYS, dead letters older than DEAD_LETTER_RETENTION_DAYS ' +
          'and outbox events published more than OUTBOX_RETENTION_DAYS ago, ' +
          'in batches of INBOX_PRUNE_BATCH_SIZE, each its own short transaction. In-progress records and unpublished events are ' +
          'never deleted. ' +
          'The background job does the same every INBOX_PRUNE_INTERVAL_MS. A copy of a message whose key was pruned is processed again.',
        security: adminSecurity,
        response: {
          200: Type.Ref('PruneResult', { description: 'What this run deleted, and the cutoffs it used' }),
          ...problemResponses(...ADMIN_PROBLEMS, ...UNAVAILABLE_PROBLEMS),
        },
      },
    },
    async () => {
      return pruneSummary(await app.retention.run());
    },
  );
}
