import { sql, type ExpressionBuilder } from 'kysely';
import type { InboxDb, InboxRow, InboxTables, InboxTx } from './schema.js';
import {
  firstRows,
  insertIfAbsent,
  type DeferredWrites,
  insertManyIfAbsent,
  type KeyedUpdate,
  parameterChunks,
  updateByKey,
} from '../db/dialect.js';

/** An inbox record as the rest of the service sees it. */
export interface InboxRecord {
  messageId: string;
  consumer: string;
  keySource: string;
  fingerprint: string;
  receivedAt: Date;
  completedAt: Date | null;
  outcome: unknown;
  attempts: number;
  leaseUntil: Date | null;
}

export function toInboxRecord(row: InboxRow): InboxRecord {
  return {
    messageId: row.message_id,
    consumer: row.consumer,
    keySource: row.key_source,
    fingerprint: row.fingerprint,
    receivedAt: row.received_at,
    completedAt: row.completed_at,
    outcome: row.outcome,
    attempts: row.attempts,
    leaseUntil: row.lease_until,
  };
}

/** The inbox's primary key: one record per message and consumer. */
export interface InboxKey {
  messageId: string;
  consumer: string;
}

export interface Claim {
  messageId: string;
  consumer: string;
  keySource: string;
  fingerprint: string;
  receivedAt: Date;
  leaseUntil?: Date | null;
}

/** Inserts the inbox row; false when the key is already taken (decided by the primary key). */
export function claimKey(trx: InboxTx | InboxDb, claim: Claim): Promise<boolean> {
  return insertIfAbsent(trx, 'inbox', claimRow(claim), ['message_id', 'consumer']);
}

/** The inbox row of a claim. */
function claimRow(claim: Claim) {
  return {
    message_id: claim.messageId,
    consumer: claim.consumer,
    key_source: claim.keySource,
    fingerprint: claim.fingerprint,
    received_at: claim.receivedAt,
    completed_at: null,
    outcome: null,
    lease_until: claim.leaseUntil ?? null,
  };
}

/**
 * Claims several keys of one consumer in one statement where the dialect allows; returns the message
 * ids this call claimed (the others are taken). Keys are claimed in message-id order, so two batches
 * with overlapping keys wait on each other in the same order and cannot deadlock.
 */
export function claimKeys(trx: InboxTx, claims: readonly Claim[]): Promise<Set<string>> {
  const sorted = [...claims].sort((a, b) => (a.messageId < b.messageId ? -1 : a.messageId > b.messageId ? 1 : 0));
  return insertManyIfAbsent(trx, 'inbox', sorted.map(claimRow), ['message_id', 'consumer'], 'message_id');
}

/** completeClaims's update: each claim's outcome by message id, the time, lease and consumer the same for all. */
const COMPLETE_CLAIMS: KeyedUpdate = {
  table: 'inbox',
  key: { column: 'message_id', type: 'text' },
  set: [
    { column: 'completed_at', from: 'bound' },
    { column: 'outcome', from: 'row', type: 'json' },
    { column: 'lease_until', from: 'null' },
  ],
  where: ['consumer'],
};

/**
 * Marks several claimed keys of one consumer completed, each with its outcome, through the transaction's
 * deferred writes: each statement must complete every claim it names, or the transaction fails.
 *
 * The claims were inserted by this transaction, so each row is in progress and locked by it: the updates
 * name the rows by primary key alone. A `completed_at IS NULL` condition would add nothing, and with it
 * PostgreSQL may walk the `inbox_completed_at` index instead, whose NULL entries (one per message since
 * the last vacuum, nearly all dead) it then reads on every batch.
 */
export async function completeClaims(
  writes: DeferredWrites,
  trx: InboxTx,
  consumer: string,
  completions: readonly { messageId: string; outcome: unknown }[],
  completedAt: Date,
): Promise<void> {
  if (completions.length === 1) {
    const [only] = completions;
    await writes.add(completeClaimQuery(trx, { messageId: only!.messageId, consumer }, only!.outcome, completedAt), {
      rows: 1,
      what: `${consumer}: completing the claim`,
    });
    return;
  }
  const rows = completions.map((c) => ({ key: c.messageId, values: [JSON.stringify(c.outcome)] }));
  for (const write of updateByKey(trx, COMPLETE_CLAIMS, rows, { set: [completedAt], where: [consumer] })) {
    await writes.add(write.query, { rows: write.rows, what: `${consumer}: completing ${write.rows} claims` });
  }
}

/** Reads the inbox records of several message ids of one consumer (those that exist). */
export async function findInboxRecords(db: InboxDb, consumer: string, messageIds: readonly string[]): Promise<InboxRecord[]> {
  const records: InboxRecord[] = [];
  for (const chunk of parameterChunks(db, messageIds, 1, 1)) {
    const rows = await db.selectFrom('inbox').selectAll().where('consumer', '=', consumer).where('message_id', 'in', chunk).execute();
    records.push(...rows.map(toInboxRecord));
  }
  return records;
}

/** The update that marks a key this transaction claimed completed with its outcome (see completeClaims). */
function completeClaimQuery(trx: InboxTx | InboxDb, key: InboxKey, outcome: unknown, completedAt: Date) {
  return trx
    .updateTable('inbox')
    .set({ completed_at: completedAt, outcome: JSON.stringify(outcome), lease_until: null })
    .where('message_id', '=', key.messageId)
    .where('consumer', '=', key.consumer);
}

/** Reads one inbox record, or undefined. */
export async function findInboxRecord(db: InboxDb, key: InboxKey): Promise<InboxRecord | undefined> {
  const row = await db
    .selectFrom('inbox')
    .selectAll()
    .where('message_id', '=', key.messageId)
    .where('consumer', '=', key.consumer)
    .executeTakeFirst();
  return row === undefined ? undefined : toInboxRecord(row);
}

export type InboxState = 'in-progress' | 'completed';

export interface InboxListFilter {
  consumer?: string | undefined;
  state?: InboxState | undefined;
  /** Only records received before this time. */
  olderThan?: Date | undefined;
  /** Continue after this record (the last one of the previous page). */
  after?: { receivedAt: Date; messageId: string; consumer: string } | undefined;
  limit: number;
}

/** Lists inbox records oldest first, keyset-paged on (received_at, message_id, consumer). */
export async function listInboxRecords(db: InboxDb, filter: InboxListFilter): Promise<InboxRecord[]> {
  let query = db.selectFrom('inbox').selectAll();
  if (filter.consumer !== undefined) query = query.where('consumer', '=', filter.consumer);
  if (filter.state === 'in-progress') query = query.where('completed_at', 'is', null);
  if (filter.state === 'completed') query = query.where('completed_at', 'is not', null);
  if (filter.olderThan !== undefined) query = query.where('received_at', '<', filter.olderThan);
  const after = filter.after;
  if (after !== undefined) {
    query = query.where((eb) =>
      eb.or([
        eb('received_at', '>', after.receivedAt),
        eb.and([
          eb('received_at', '=', after.receivedAt),
          eb.or([
            eb('message_id', '>', after.messageId),
            eb.and([eb('message_id', '=', after.messageId), eb('consumer', '>', after.consumer)]),
          ]),
        ]),
      ]),
    );
  }
  query = query.orderBy('received_at').orderBy('message_id').orderBy('consumer');
  const rows = await firstRows(db, query, filter.limit).execute();
  return rows.map(toInboxRecord);
}

/** One attempt at an in-progress two-phase record: its key and the attempt count it holds the record under. */
export interface AttemptKey extends InboxKey {
  attempts: number;
}

/**
 * The record while it is still in progress under this attempt; with `leaseEndedBy`, also only once its
 * lease ran out. Every settlement goes through it, so a stale attempt (taken over since) or an operator
 * acting on a record read earlier changes nothing.
 */
function heldBy(key: AttemptKey, leaseEndedBy?: Date) {
  return (eb: ExpressionBuilder<InboxTables, 'inbox'>) =>
    eb.and([
      eb('message_id', '=', key.messageId),
      eb('consumer', '=', key.consumer),
      eb('completed_at', 'is', null),
      eb('attempts', '=', key.attempts),
      ...(leaseEndedBy === undefined ? [] : [eb.or([eb('lease_until', 'is', null), eb('lease_until', '<=', leaseEndedBy)])]),
    ]);
}

/** Phase 2 of a two-phase attempt: records its outcome; 0 when the record is no longer this attempt's. */
export async function completeAttempt(db: InboxDb, key: AttemptKey, outcome: unknown, completedAt: Date): Promise<number> {
  const result = await db
    .updateTable('inbox')
    .set({ completed_at: completedAt, outcome: JSON.stringify(outcome), lease_until: null })
    .where(heldBy(key))
    .executeTakeFirst();
  return Number(result.numUpdatedRows);
}

/** Ends the lease of an attempt that is over with its outcome unknown, so the next copy need not wait for it. */
export async function endAttemptLease(db: InboxDb, key: AttemptKey, at: Date): Promise<boolean> {
  const result = await db.updateTable('inbox').set({ lease_until: at }).where(heldBy(key)).executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

/**
 * Re-records the outcome of an attempt whose record an operator released while it was still sending: the
 * effect happened, so the next copy must not perform it again. False when a new claim exists meanwhile.
 */
export function recordLateOutcome(db: InboxDb, claim: Claim, attempts: number, outcome: unknown, completedAt: Date): Promise<boolean> {
  const row = { ...claimRow(claim), attempts, completed_at: completedAt, outcome: JSON.stringify(outcome), lease_until: null };
  return insertIfAbsent(db, 'inbox', row, ['message_id', 'consumer']);
}

/**
 * How an operator settles a record that needs reconciliation: the effect happened (`completed`, with the
 * outcome the operator records for it: every later copy is answered with it), or it did not (`released`:
 * the record is deleted, and the next delivery runs the command again).
 */
export type Settlement = { readonly resolution: 'completed'; readonly outcome: unknown } | { readonly resolution: 'released' };

/**
 * An operator's settlement of an in-progress record read under `key.attempts`, once its lease ran out at
 * `at`; false when the record is no longer that attempt's (taken over, completed or settled meanwhile),
 * or its lease still runs.
 */
export async function settleByOperator(db: InboxDb, key: AttemptKey, settlement: Settlement, at: Date): Promise<boolean> {
  if (settlement.resolution === 'released') return releaseClaim(db, key, at);
  const result = await db
    .updateTable('inbox')
    .set({ completed_at: at, outcome: JSON.stringify(settlement.outcome), lease_until: null })
    .where(heldBy(key, at))
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

/**
 * Takes over an in-progress record whose lease ran out; true for exactly one of several copies that
 * try at once, because the update is conditional on the attempt count it read.
 */
export async function takeOverClaim(db: InboxDb, record: InboxRecord, leaseUntil: Date): Promise<boolean> {
  const result = await db
    .updateTable('inbox')
    .set({ lease_until: leaseUntil, attempts: record.attempts + 1 })
    .where('message_id', '=', record.messageId)
    .where('consumer', '=', record.consumer)
    .where('completed_at', 'is', null)
    .where('attempts', '=', record.attempts)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

/**
 * Deletes an in-progress record held under `key.attempts` (with `leaseEndedBy`: only once its lease ran
 * out): the next delivery starts from scratch. True when one was deleted.
 */
export async function releaseClaim(db: InboxDb, key: AttemptKey, leaseEndedBy?: Date): Promise<boolean> {
  const result = await db.deleteFrom('inbox').where(heldBy(key, leaseEndedBy)).executeTakeFirst();
  return Number(result.numDeletedRows) === 1;
}

/**
 * In-progress records per consumer: how many, how many of them are past their lease at `now` (no attempt
 * is presumed alive: they wait for a redelivery or an operator), and when the oldest was received (one
 * grouped query).
 */
export async function inProgressByConsumer(
  db: InboxDb,
  now: Date,
): Promise<{ consumer: string; count: number; pastLease: number; oldest: Date | null }[]> {
  const rows = await db
    .selectFrom('inbox')
    .select([
      'consumer',
      sql<number | string | bigint>`count(*)`.as('n'),
      // A record without a lease counts as past it, as the console's needs-reconciliation list has it.
      sql<number | string | bigint>`sum(case when lease_until is null or lease_until <= ${now} then 1 else 0 end)`.as('past_lease'),
      sql<Date | string | null>`min(received_at)`.as('oldest'),
    ])
    .where('completed_at', 'is', null)
    .groupBy('consumer')
    .execute();
  return rows.map((row) => ({
    consumer: row.consumer,
    count: Number(row.n),
    pastLease: Number(row.past_lease),
    oldest: row.oldest === null ? null : new Date(row.oldest),
  }));
}
