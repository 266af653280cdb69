import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import {
  findInboxRecord,
  type InboxKey,
  type InboxRecord,
  isRecordedMessageId,
  isValidConsumerName,
  listInboxRecords,
  retryAfterSeconds,
} from '../../inbox/machinery.js';
import { retryOnceIfDeadlocked } from '../../db/dialect.js';

import { adminSecurity, adminGuard } from '../../http/admin-guard.js';
import { jsonBodyOnly } from '../../http/body-parsers.js';
import { inboxPath } from '../../http/error-handler.js';
import { inboxRecordToJson } from '../../http/inbox-record.js';
import { pageSchema, queryInstant, toInstant } from '../../http/page.js';
import { ADMIN_PROBLEMS, problemResponses, ProblemError } from '../../http/problem.js';
import type { AdminGuard } from '../route-options.js';
import {
  InboxRecordRef,
  InboxRecordSchema,
  KeyParams,
  ListQuery,
  PAGE_LIMIT,
  ReconcileAnswer,
  ReconcileBody,
} from './inbox-records.schemas.js';

function encodeCursor(record: InboxRecord): string {
  return Buffer.from(JSON.stringify([record.receivedAt.toISOString(), record.messageId, record.consumer])).toString('base64url');
}

function decodeCursor(cursor: string): { receivedAt: Date; messageId: string; consumer: string } {
  try {
    const [receivedAt, messageId, consumer] = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as unknown[];
    // A cursor is client input: each part must be a value this service could have written into one.
    const instant = typeof receivedAt === 'string' ? toInstant(receivedAt) : undefined;
    if (
      instant !== undefined &&
      typeof messageId === 'string' &&
      isRecordedMessageId(messageId) &&
      typeof consumer === 'string' &&
      isValidConsumerName(consumer)
    ) {
      return { receivedAt: instant, messageId, consumer };
    }
  } catch {
    // fall through
  }
  throw new ProblemError('invalid-request', { detail: 'after must be the nextAfter value of a previous page' });
}

/**
 * Why a record cannot be settled by an operator now, or undefined when it can: it is gone, completed, or
 * its current attempt is inside its lease (that attempt may still be sending and settles it itself).
 */
function unsettleable(key: InboxKey, record: InboxRecord | undefined, now: Date): ProblemError | undefined {
  if (record === undefined) return new ProblemError('not-found', { detail: `no inbox record for ${key.consumer} / ${key.messageId}` });
  if (record.completedAt !== null) {
    return new ProblemError('not-in-progress', { detail: `the record was completed at ${record.completedAt.toISOString()}` });
  }
  if (record.leaseUntil === null || record.leaseUntil.getTime() <= now.getTime()) return undefined;
  const retryAfter = retryAfterSeconds(record.leaseUntil.getTime() - now.getTime());
  return new ProblemError(
    'lease-not-expired',
    {
      detail: `attempt ${record.attempts} may still be running until ${record.leaseUntil.toISOString()}; nothing was changed`,
      consumer: key.consumer,
      messageId: key.messageId,
      leaseUntil: record.leaseUntil.toISOString(),
      retryAfterSeconds: retryAfter,
      inboxRecord: inboxPath(key.consumer, key.messageId),
    },
    { 'retry-after': String(retryAfter) },
  );
}

/** Admin: see inbox records and settle half-done side effects. */
export async function inboxRoutes(app: FastifyInstance): Promise<void> {
  app.addSchema(InboxRecordSchema);
  const onRequest = adminGuard(app.config);
  registerListInboxRecords(app, onRequest);
  registerGetInboxRecord(app, onRequest);
  registerReconcileInboxRecord(app, onRequest);
}

/** GET /inbox: records oldest first, filtered and keyset-paged. */
function registerListInboxRecords(app: FastifyInstance, onRequest: AdminGuard): void {
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  api.get(
    '/inbox',
    {
      onRequest,
      schema: {
        operationId: 'listInboxRecords',
        tags: ['inbox'],
        summary: 'Inbox records, oldest first (filter by consumer, state, age; keyset-paged)',
        security: adminSecurity,
        querystring: ListQuery,
        response: {
          200: pageSchema(InboxRecordRef),
          ...problemResponses('invalid-request', ...ADMIN_PROBLEMS),
        },
      },
    },
    async (request) => {
      const { limit = PAGE_LIMIT, ...q } = request.query;
      const records = await retryOnceIfDeadlocked(() =>
        listInboxRecords(app.db, {
          consumer: q.consumer,
          state: q.state,
          olderThan: q.olderThan === undefined ? undefined : queryInstant(q.olderThan, 'olderThan'),
          after: q.after === undefined ? undefined : decodeCursor(q.after),
          limit: limit + 1,
        }),
      );
      const items = records.slice(0, limit);
      const last = items.at(-1);
      return { items: items.map(inboxRecordToJson), nextAfter: records.length > limit && last !== undefined ? encodeCursor(last) : null };
    },
  );
}

/** GET /inbox/{consumer}/{messageId}: one record. */
function registerGetInboxRecord(app: FastifyInstance, onRequest: AdminGuard): void {
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  api.get(
    '/inbox/:consumer/:messageId',
    {
      onRequest,
      schema: {
        operationId: 'getInboxRecord',
        tags: ['inbox'],
        summary: 'One inbox record: state, key source, fingerprint, times, outcome, attempts',
        security: adminSecurity,
        params: KeyParams,
        response: {
          200: { ...InboxRecordRef, description: 'The inbox record' },
          ...problemResponses('invalid-request', ...ADMIN_PROBLEMS, 'not-found'),
        },
      },
    },
    async (request) => {
      const key = request.params;
      const record = await retryOnceIfDeadlocked(() => findInboxRecord(app.db, key));
      if (record === undefined) throw new ProblemError('not-found', { detail: `no inbox record for ${key.consumer} / ${key.messageId}` });
      return inboxRecordToJson(record);
    },
  );
}

/** POST /inbox/{consumer}/{messageId}/reconcile: an operator settles an in-progress record. */
function registerReconcileInboxRecord(app: FastifyInstance, onRequest: AdminGuard): void {
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  api.post(
    '/inbox/:consumer/:messageId/reconcile',
    {
      onRequest: [onRequest, jsonBodyOnly],
      schema: {
        operationId: 'reconcileInboxRecord',
        tags: ['inbox'],
        summary: 'Settle an in-progress record: completed (it happened) or release (run it again on the next delivery)',
        security: adminSecurity,
        params: KeyParams,
        body: ReconcileBody,
        response: {
          200: ReconcileAnswer,
          ...problemResponses(
            'invalid-request',
            'malformed-json',
            ...ADMIN_PROBLEMS,
            'not-found',
            'not-in-progress',
            'lease-not-expired',
            'payload-too-large',
            'unsupported-media-type',
          ),
        },
      },
    },
    async (request) => {
      const key = request.params;
      const { resolution, note } = request.body;
      const now = app.now();
      const read = await findInboxRecord(app.db, key);
      const refusal = unsettleable(key, read, now);
      if (refusal !== undefined) throw refusal;
      // Tied to the attempt read: a take-over since then (a new attempt, a new lease) changes nothing.
      const attempt = { ...key, attempts: read!.attempts };
      const outcome = { result: 'reconciled', resolution, note: note ?? null, reconciledAt: now.toISOString() };
      const settled = await app.inbox.store.settle(
        attempt,
        resolution === 'completed' ? { resolution: 'completed', outcome } : { resolution: 'released' },
        now,
      );
      if (!settled) {
        const existing = await findInboxRecord(app.db, key);
        throw unsettleable(key, existing, now) ?? new ProblemError('lease-not-expired', { detail: 'the record was taken over meanwhile' });
      }
      request.log.warn({ consumer: key.consumer, messageId: key.messageId, resolution, note }, 'inbox record reconciled by an operator');
      const record = resolution === 'completed' ? await findInboxRecord(app.db, key) : undefined;
      return { resolution, record: record === undefined ? null : inboxRecordToJson(record) };
    },
  );
}
