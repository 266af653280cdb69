import { sql, type Kysely } from 'kysely';
import type { Database } from '../schema/database.js';
import { firstRows } from '../db/dialect.js';
import { type DeadLetter, type InboxRecord, toDeadLetter, toInboxRecord } from '../inbox/machinery.js';
import { toEvent } from '../outbox/outbox.repository.js';
import type { OutboxEvent } from '../outbox/outbox-event.js';

/** The SQL behind the operator's admin routes: read-mostly queries over the inbox, dead letters and outbox. */

type Db = Kysely<Database>;

function count(value: number | string | bigint): number {
  return Number(value);
}

function toDate(value: Date | string | null): Date | null {
  return value === null ? null : new Date(value);
}

/** One group of dead letters: every letter of a consumer refused for one reason. */
export interface DeadLetterGroup {
  consumer: string;
  reason: string;
  count: number;
  oldest: Date;
  newest: Date;
  /** The highest id in the group: a bulk action names it, so letters that arrive later are not touched unseen. */
  lastId: string;
}

/** Dead letters grouped by consumer and reason, largest group first. */
export async function deadLetterGroups(db: Db): Promise<DeadLetterGroup[]> {
  const rows = await db
    .selectFrom('dead_letters')
    .select([
      'consumer',
      'reason',
      sql<number | string>`count(*)`.as('n'),
      sql<Date | string>`min(received_at)`.as('oldest'),
      sql<Date | string>`max(received_at)`.as('newest'),
      sql<number | string>`max(id)`.as('last_id'),
    ])
    .groupBy(['consumer', 'reason'])
    .execute();
  return rows
    .map((row) => ({
      consumer: row.consumer,
      reason: row.reason,
      count: count(row.n),
      oldest: new Date(row.oldest),
      newest: new Date(row.newest),
      lastId: String(row.last_id),
    }))
    .sort((a, b) => b.count - a.count || a.consumer.localeCompare(b.consumer) || a.reason.localeCompare(b.reason));
}

export interface GroupSelector {
  consumer: string;
  reason: string;
  /** Only letters with an id up to this one (all when absent). */
  throughId?: string | undefined;
}

function groupQuery(db: Db, group: GroupSelector) {
  const query = db.selectFrom('dead_letters').where('consumer', '=', group.consumer).where('reason', '=', group.reason);
  return group.throughId === undefined ? query : query.where('id', '<=', group.throughId);
}

/** The oldest `limit` letters of a group (up to its throughId), oldest first. */
export async function deadLetterIdsOfGroup(db: Db, group: GroupSelector, limit: number): Promise<string[]> {
  const rows = await firstRows(db, groupQuery(db, group).select('id').orderBy('id'), limit).execute();
  return rows.map((row) => String(row.id));
}

/** How many letters of a group (up to its throughId) are left. */
export async function countDeadLettersOfGroup(db: Db, group: GroupSelector): Promise<number> {
  const row = await groupQuery(db, group)
    .select(sql<number | string>`count(*)`.as('n'))
    .executeTakeFirstOrThrow();
  return count(row.n);
}

/** Deletes one dead letter; false when it was not there (already discarded or replayed). */
export async function deleteDeadLetter(db: Db, id: string): Promise<boolean> {
  const result = await db.deleteFrom('dead_letters').where('id', '=', id).executeTakeFirst();
  return Number(result.numDeletedRows) > 0;
}

/** Count of dead letters by reason, across consumers. */
export async function deadLettersByReason(db: Db): Promise<{ reason: string; count: number }[]> {
  const rows = await db
    .selectFrom('dead_letters')
    .select(['reason', sql<number | string>`count(*)`.as('n')])
    .groupBy('reason')
    .execute();
  return rows.map((row) => ({ reason: row.reason, count: count(row.n) })).sort((a, b) => b.count - a.count);
}

/**
 * In-progress records whose lease has ended (or that never had one): the side effect may or may not have
 * happened, and no attempt is working on it. Oldest first.
 */
export async function staleInProgress(db: Db, now: Date, limit: number): Promise<InboxRecord[]> {
  const query = db
    .selectFrom('inbox')
    .selectAll()
    .where('completed_at', 'is', null)
    .where((eb) => eb.or([eb('lease_until', 'is', null), eb('lease_until', '<=', now)]))
    .orderBy('received_at')
    .orderBy('message_id');
  const rows = await firstRows(db, query, limit).execute();
  return rows.map(toInboxRecord);
}

/** How many in-progress records have passed their lease. */
export async function countStaleInProgress(db: Db, now: Date): Promise<number> {
  const row = await db
    .selectFrom('inbox')
    .select(sql<number | string>`count(*)`.as('n'))
    .where('completed_at', 'is', null)
    .where((eb) => eb.or([eb('lease_until', 'is', null), eb('lease_until', '<=', now)]))
    .executeTakeFirstOrThrow();
  return count(row.n);
}

/** Dead letters recorded under one key (every consumer unless one is named), newest first. */
export async function deadLettersByKey(db: Db, messageId: string, consumer: string | undefined, limit: number): Promise<DeadLetter[]> {
  let query = db.selectFrom('dead_letters').selectAll().where('message_id', '=', messageId).orderBy('id', 'desc');
  if (consumer !== undefined) query = query.where('consumer', '=', consumer);
  return (await firstRows(db, query, limit).execute()).map(toDeadLetter);
}

/** A group's oldest `limit` letters, each whole, oldest first. */
export async function deadLettersOfGroup(db: Db, group: GroupSelector, limit: number): Promise<DeadLetter[]> {
  const rows = await firstRows(db, groupQuery(db, group).selectAll().orderBy('id'), limit).execute();
  return rows.map(toDeadLetter);
}

/** An outbox event with its publication time (null: still pending). */
export type RecordedEvent = OutboxEvent;

/** The outbox events a command caused (its consumer and message id), published or not, in seq order. */
export async function eventsCausedBy(db: Db, consumer: string, messageId: string, limit: number): Promise<RecordedEvent[]> {
  const query = db.selectFrom('outbox').selectAll().where('consumer', '=', consumer).where('causation_id', '=', messageId).orderBy('seq');
  const rows = await firstRows(db, query, limit).execute();
  return rows.map(toEvent);
}

/** The pending events of one book (ordering key): the oldest goes first, every later one waits behind it. */
export interface PendingBook {
  bookId: string;
  pending: number;
  oldestOccurredAt: Date | null;
  /** The oldest pending event: the one the book's other events are held behind. */
  head: { seq: string; id: string; type: string; attempts: number; lastError: string | null; lastAttemptAt: Date | null } | null;
}

/** Pending events per book, the books with the oldest pending event first (at most `limit` books). */
export async function pendingByBook(db: Db, limit: number): Promise<PendingBook[]> {
  const groups = await firstRows(
    db,
    db
      .selectFrom('outbox')
      .select([
        'ordering_key',
        sql<number | string>`count(*)`.as('n'),
        sql<number | string>`min(seq)`.as('head_seq'),
        sql<Date | string | null>`min(occurred_at)`.as('oldest'),
      ])
      .where('published_at', 'is', null)
      .groupBy('ordering_key')
      .orderBy(sql`min(seq)`),
    limit,
  ).execute();
  if (groups.length === 0) return [];
  const heads = await db
    .selectFrom('outbox')
    .select(['seq', 'id', 'type', 'attempts', 'last_error', 'last_attempt_at'])
    // Still pending (published meanwhile, a head is shown as none): outbox_pending finds them by seq.
    .where('published_at', 'is', null)
    .where(
      'seq',
      'in',
      groups.map((g) => String(g.head_seq)),
    )
    .execute();
  const headBySeq = new Map(heads.map((h) => [String(h.seq), h]));
  return groups.map((g) => {
    const head = headBySeq.get(String(g.head_seq));
    return {
      bookId: g.ordering_key.toLowerCase(),
      pending: count(g.n),
      oldestOccurredAt: toDate(g.oldest),
      head:
        head === undefined
          ? null
          : {
              seq: String(head.seq),
              id: head.id,
              type: head.type,
              attempts: head.attempts,
              lastError: head.last_error,
              lastAttemptAt: head.last_attempt_at,
            },
    };
  });
}
