import type { DeadLetterRow, InboxDb, InboxTx } from './schema.js';
import { firstRows, insertReturning } from '../db/dialect.js';

export interface DeadLetter {
  id: string;
  consumer: string;
  messageId: string;
  keySource: string;
  payload: unknown;
  storedFingerprint: string;
  receivedFingerprint: string;
  reason: string;
  receivedAt: Date;
  /** Why, in words (schema errors, the last error of a command that kept failing); null if the reason says it all. */
  detail: string | null;
}

export type NewDeadLetter = Omit<DeadLetter, 'id' | 'detail'> & { detail?: string };

/** Longest detail kept (the column's length, in characters). */
const DETAIL_LENGTH = 1000;

/** A dead-letter row as the rest of the service sees it. */
export function toDeadLetter(row: DeadLetterRow): DeadLetter {
  return {
    id: String(row.id),
    consumer: row.consumer,
    messageId: row.message_id,
    keySource: row.key_source,
    payload: row.payload,
    storedFingerprint: row.stored_fingerprint,
    receivedFingerprint: row.received_fingerprint,
    reason: row.reason,
    receivedAt: row.received_at,
    detail: row.detail,
  };
}

/** Records a message that must not be applied; runs in its own statement, outside any claim. */
export async function insertDeadLetter(db: InboxDb | InboxTx, letter: NewDeadLetter): Promise<string> {
  const values = {
    consumer: letter.consumer,
    message_id: letter.messageId,
    key_source: letter.keySource,
    payload: JSON.stringify(letter.payload),
    stored_fingerprint: letter.storedFingerprint,
    received_fingerprint: letter.receivedFingerprint,
    reason: letter.reason,
    received_at: letter.receivedAt,
    // Only when given: the statement stays the same for the letters that have none.
    ...(letter.detail !== undefined && { detail: [...letter.detail].slice(0, DETAIL_LENGTH).join('') }),
  };
  return String(await insertReturning(db, 'dead_letters', values, 'id'));
}

export interface DeadLetterPage {
  items: DeadLetter[];
  /** Pass as `after` to read the next page; null on the last page. */
  nextAfter: string | null;
}

/** Lists dead letters newest first, keyset-paged by id. */
export async function listDeadLetters(
  db: InboxDb,
  filter: { consumer?: string | undefined; after?: string | undefined; limit: number },
): Promise<DeadLetterPage> {
  let query = db.selectFrom('dead_letters').selectAll().orderBy('id', 'desc');
  if (filter.consumer !== undefined) query = query.where('consumer', '=', filter.consumer);
  if (filter.after !== undefined) query = query.where('id', '<', filter.after);
  const rows = await firstRows(db, query, filter.limit + 1).execute();
  const items = rows.slice(0, filter.limit).map(toDeadLetter);
  return { items, nextAfter: rows.length > filter.limit ? (items.at(-1)?.id ?? null) : null };
}

/** Reads one dead letter, or undefined. */
export async function findDeadLetter(db: InboxDb, id: string): Promise<DeadLetter | undefined> {
  const row = await db.selectFrom('dead_letters').selectAll().where('id', '=', id).executeTakeFirst();
  return row === undefined ? undefined : toDeadLetter(row);
}
