import { sql, type Kysely } from 'kysely';
import type { Database, OutboxRow, Tx } from '../schema/database.js';
import {
  firstRows,
  insertManySkippingPresent,
  type DeferredWrites,
  listStatement,
  type ListStatement,
  lockNextPending,
  parameterChunks,
} from '../db/dialect.js';
import type { OutboxEvent, OutboxEventInput } from './outbox-event.js';

/** All outbox SQL: writing events in the work's transaction, claiming them for the relay, listing them. */

/** The outbox columns that hold JSON texts. */
const JSON_COLUMNS: ReadonlySet<string> = new Set(['data']);

function toRow(event: OutboxEventInput) {
  return {
    id: event.id,
    type: event.type,
    source: event.source,
    ordering_key: event.orderingKey,
    consumer: event.consumer,
    causation_id: event.causationId,
    data: JSON.stringify(event.data),
    occurred_at: event.occurredAt,
    published_at: null,
    attempts: 0,
    last_error: null,
    last_attempt_at: null,
    trace_parent: event.traceParent ?? null,
    trace_state: event.traceState ?? null,
  };
}

/** An outbox row as the rest of the service sees it (ordering keys in lower case, as book ids are). */
export function toEvent(row: OutboxRow): OutboxEvent {
  return {
    seq: String(row.seq),
    id: row.id,
    type: row.type,
    source: row.source,
    orderingKey: row.ordering_key.toLowerCase(),
    consumer: row.consumer,
    causationId: row.causation_id,
    data: row.data as Record<string, unknown>,
    occurredAt: row.occurred_at,
    publishedAt: row.published_at,
    attempts: row.attempts,
    lastError: row.last_error,
    lastAttemptAt: row.last_attempt_at,
    traceParent: row.trace_parent ?? null,
    traceState: row.trace_state ?? null,
  };
}

/**
 * Writes events in the transaction of the work that caused them, as one multi-row insert (nothing on an
 * empty list): they commit or roll back with that work. An event id already present is skipped, not an
 * error (PostgreSQL: on conflict do nothing; SQL Server: the statement fails alone, then the rows go one
 * by one, skipping the present ones). Inside an inbox claim that cannot happen, as ids derive from the key.
 * With `writes`, the insert goes with the transaction's other deferred writes.
 */
export async function insertOutboxEvents(trx: Tx, events: readonly OutboxEventInput[], writes?: DeferredWrites): Promise<void> {
  if (events.length === 0) return;
  await insertManySkippingPresent(trx, 'outbox', events.map(toRow), ['id'], writes, JSON_COLUMNS);
}

/**
 * Claims the next events to publish, inside the relay's transaction: the oldest pending rows, locked
 * until that transaction ends and skipped by other relays meanwhile (PostgreSQL: FOR UPDATE SKIP LOCKED;
 * SQL Server: UPDLOCK, READPAST), so two replicas never publish the same event in normal operation.
 *
 * Per ordering key (book), only events with no older pending event outside this batch are returned:
 * an older one held by another relay, or one this batch skipped, is published first, so consumers see a
 * book's events in the order their commits changed its stock. Events come back in seq order.
 */
export async function claimPublishableEvents(trx: Tx, limit: number): Promise<OutboxEvent[]> {
  const rows: OutboxRow[] = await lockNextPending(trx, 'outbox', 'published_at', 'seq', limit);
  if (rows.length === 0) return [];

  const events = rows.map(toEvent).sort((a, b) => compareSeq(a.seq, b.seq));
  const outside = await oldestPendingOutside(trx, rows);
  const limitByKey = new Map(outside.map((o) => [o.ordering_key.toLowerCase(), String(o.next)]));
  return events.filter((e) => {
    const before = limitByKey.get(e.orderingKey);
    return before === undefined || compareSeq(e.seq, before) < 0;
  });
}

/**
 * The oldest pending event of each of the rows' keys that the rows do not hold. A key's statement must
 * exclude all of that key's rows, so the keys are chunked whole, each binding itself and its seqs.
 */
async function oldestPendingOutside(trx: Tx, rows: readonly OutboxRow[]): Promise<{ ordering_key: string; next: string }[]> {
  const seqsByKey = new Map<string, OutboxRow['seq'][]>();
  for (const row of rows) seqsByKey.set(row.ordering_key, [...(seqsByKey.get(row.ordering_key) ?? []), row.seq]);
  // Keys and seqs as two lists: one text whatever the batch holds where the engine binds arrays (the
  // IN lists below make one per size).
  const query = listStatement(trx, OLDEST_PENDING_OUTSIDE, [[...seqsByKey.keys()], rows.map((row) => String(row.seq))]);
  if (query !== undefined) return (await trx.executeQuery<{ ordering_key: string; next: string }>(query)).rows;
  const found: { ordering_key: string; next: string }[] = [];
  for (const chunk of parameterChunks(trx, [...seqsByKey], ([, seqs]) => 1 + seqs.length)) {
    found.push(
      ...(await trx
        .selectFrom('outbox')
        .select(['ordering_key', sql<string>`min(seq)`.as('next')])
        .where('published_at', 'is', null)
        .where(
          'ordering_key',
          'in',
          chunk.map(([key]) => key),
        )
        .where(
          'seq',
          'not in',
          chunk.flatMap(([, seqs]) => seqs),
        )
        .groupBy('ordering_key')
        .execute()),
    );
  }
  return found;
}

/** Numeric order of two bigint sequence numbers held as decimal strings. */
function compareSeq(a: string, b: string): number {
  return a.length - b.length || (a < b ? -1 : a > b ? 1 : 0);
}

/** The oldest pending event of each key (list 1) that is not one of the batch's (list 2). */
const OLDEST_PENDING_OUTSIDE: ListStatement = {
  text: ({ inList }) =>
    'select "ordering_key", min("seq") as "next" from "outbox" where "published_at" is null ' +
    `and "ordering_key" ${inList(1)} and not ("seq" ${inList(2)}) group by "ordering_key"`,
};

/** Marks the events (list 2) published at parameter 1, if still pending. */
const MARK_PUBLISHED: ListStatement = {
  text: ({ parameter, inList }) =>
    `update "outbox" set "published_at" = ${parameter(1)}, "attempts" = "attempts" + 1, "last_error" = null, "last_attempt_at" = ${parameter(1)} ` +
    `where "id" ${inList(2)} and "published_at" is null`,
};

/** Marks confirmed events published, in the relay's transaction. */
export async function markPublished(trx: Tx, ids: readonly string[], at: Date): Promise<void> {
  if (ids.length === 0) return;
  // The ids as one list: one text whatever the batch's size, where the engine binds arrays.
  const query = listStatement(trx, MARK_PUBLISHED, [at, ids]);
  if (query !== undefined) {
    await trx.executeQuery(query);
    return;
  }
  for (const chunk of parameterChunks(trx, ids, 1, 3)) {
    await trx
      .updateTable('outbox')
      .set({ published_at: at, attempts: sql`attempts + 1`, last_error: null, last_attempt_at: at })
      .where('id', 'in', chunk)
      .where('published_at', 'is', null)
      .execute();
  }
}

/** Records a failed publish attempt on events still pending, in its own statement (their batch rolled back). */
export async function recordPublishFailure(db: Kysely<Database>, ids: readonly string[], error: string, at: Date): Promise<void> {
  for (const chunk of parameterChunks(db, ids, 1, 2)) {
    await db
      .updateTable('outbox')
      .set({ attempts: sql`attempts + 1`, last_error: error.slice(0, 1000), last_attempt_at: at })
      .where('id', 'in', chunk)
      .where('published_at', 'is', null)
      .execute();
  }
}

export type OutboxState = 'pending' | 'failed';

/**
 * Lists pending events oldest first, keyset-paged by seq; `failed` is the pending events whose last
 * publish attempt failed.
 */
export async function listOutboxEvents(
  db: Kysely<Database>,
  filter: { state: OutboxState; after?: string | undefined; limit: number },
): Promise<{ items: OutboxEvent[]; nextAfter: string | null }> {
  let query = db.selectFrom('outbox').selectAll().where('published_at', 'is', null).orderBy('seq');
  if (filter.state === 'failed') query = query.where('last_error', 'is not', null);
  if (filter.after !== undefined) query = query.where('seq', '>', filter.after);
  const rows = await firstRows(db, query, filter.limit + 1).execute();
  const items = rows.slice(0, filter.limit).map(toEvent);
  return { items, nextAfter: rows.length > filter.limit ? (items.at(-1)?.seq ?? null) : null };
}

/** How many events wait to be published, and when the oldest of them happened (null: none). */
export async function pendingOutboxStats(db: Kysely<Database>): Promise<{ pending: number; oldest: Date | null }> {
  const row = await db
    .selectFrom('outbox')
    .select([sql<number | string>`count(*)`.as('n'), sql<Date | string | null>`min(occurred_at)`.as('oldest')])
    .where('published_at', 'is', null)
    .executeTakeFirstOrThrow();
  return { pending: Number(row.n), oldest: row.oldest === null ? null : new Date(row.oldest) };
}
