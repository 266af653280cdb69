import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import { staleInProgress } from '../../admin/console.repository.js';
import { retryOnceIfDeadlocked } from '../../db/dialect.js';
import { downstreamKey, type InboxRecord } from '../../inbox/machinery.js';
import { adminGuard, adminSecurity } from '../../http/admin-guard.js';
import { inboxRecordToJson } from '../../http/inbox-record.js';
import { ADMIN_PROBLEMS, problemResponses } from '../../http/problem.js';
import { type AdminGuard, LimitQuery } from '../route-options.js';
import { StuckRecord } from './stuck-records.schemas.js';

function stuckToApi(record: InboxRecord) {
  return { ...inboxRecordToJson(record), downstreamKey: downstreamKey(record.consumer, record.messageId) };
}

/** Admin: the side effects that wait for a person to say whether they happened. */
export async function stuckRecordRoutes(app: FastifyInstance): Promise<void> {
  registerNeedsReconciliation(app, adminGuard(app.config));
}

/** GET /inbox/needs-reconciliation: in-progress side effects past their lease. */
function registerNeedsReconciliation(app: FastifyInstance, onRequest: AdminGuard): void {
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  api.get(
    '/inbox/needs-reconciliation',
    {
      onRequest,
      schema: {
        operationId: 'listNeedsReconciliation',
        tags: ['inbox'],
        summary: 'In-progress side effects past their lease: each waits for a person to say whether it happened',
        description:
          'No attempt is working on these any more, and the receiver may or may not have acted. Ask the receiver about the ' +
          'downstreamKey, then POST the reconcile link: completed (it happened) or release (it did not; the next delivery runs it).',
        security: adminSecurity,
        querystring: LimitQuery,
        response: {
          200: Type.Object({ items: Type.Array(StuckRecord) }, { additionalProperties: false, description: 'Records past their lease' }),
          ...problemResponses('invalid-request', ...ADMIN_PROBLEMS),
        },
      },
    },
    async (request) => {
      const records = await retryOnceIfDeadlocked(() => staleInProgress(app.db, app.now(), request.query.limit ?? 100));
      return { items: records.map(stuckToApi) };
    },
  );
}
