import type { Kysely } from 'kysely';
import type { Database, InboxRow, Tx } from '../db/database.js';
import { insertIfAbsent, readJson } from '../db/dialect.js';
import type { KeySource } from './message-key.js';

/** An inbox record as the rest of the service sees it. */
export interface InboxRecord {
  messageId: string;
  consumer: string;
  keySource: KeySource;
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
    keySource: row.key_source as KeySource,
    fingerprint: row.fingerprint,
    receivedAt: row.received_at,
    completedAt: row.completed_at,
    outcome: row.outcome === null ? null : readJson(row.outcome),
    attempts: row.attempts,
    leaseUntil: row.lease_until,
  };
}

export interface Claim {
  messageId: string;
  consumer: string;
  keySource: KeySource;
  fingerprint: string;
  receivedAt: Date;
  leaseUntil?: Date | null;
}

/** Inserts the inbox row; false when the key is already taken (decided by the primary key). */
export function claimKey(trx: Tx | Kysely<Database>, claim: Claim): Promise<boolean> {
  return insertIfAbsent(
    trx,
    'inbox',
    {
      message_id: claim.messageId,
      consumer: claim.consumer,
      key_source: claim.keySource,
      fingerprint: claim.fingerprint,
      received_at: claim.receivedAt,
      completed_at: null,
      outcome: null,
      lease_until: claim.leaseUntil ?? null,
    },
    ['message_id', 'consumer'],
  );
}

/** Marks a claimed key completed with its outcome; returns the number of rows changed. */
export async function completeClaim(
  trx: Tx | Kysely<Database>,
  key: { messageId: string; consumer: string },
  outcome: unknown,
  completedAt: Date,
): Promise<number> {
  const result = await trx
    .updateTable('inbox')
    .set({ completed_at: completedAt, outcome: JSON.stringify(outcome), lease_until: null })
    .where('message_id', '=', key.messageId)
    .where('consumer', '=', key.consumer)
    .where('completed_at', 'is', null)
    .executeTakeFirst();
  return Number(result.numUpdatedRows);
}

/** Reads one inbox record, or undefined. */
export async function findInboxRecord(
  db: Kysely<Database>,
  key: { messageId: string; consumer: string },
): Promise<InboxRecord | undefined> {
  const row = await db
    .selectFrom('inbox')
    .selectAll()
    .where('message_id', '=', key.messageId)
    .where('consumer', '=', key.consumer)
    .executeTakeFirst();
  return row === undefined ? undefined : toInboxRecord(row);
}
