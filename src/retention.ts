import type { Db } from './schema/database.js';
import { ddlOf, KEY_LOCK_TABLE } from './db/dialect.js';
import { InboxStore, pruneTable, retentionCutoff, type TablePruneResult } from './inbox/machinery.js';

/**
 * The bookstore's retention run: the inbox's completed records and dead letters (src/inbox/retention.ts)
 * and the outbox's published events, each past its own retention, in bounded batches.
 */

export interface RetentionPolicy {
  /** Completed inbox rows older than this many days are pruned. */
  inboxRetentionDays: number;
  /** Dead letters older than this many days are pruned. */
  deadLetterRetentionDays: number;
  /** Published outbox events older than this many days are pruned; pending ones never are. */
  outboxRetentionDays: number;
  /** Rows per DELETE. */
  batchSize: number;
  /** Batches per table per run: the bound on one run; what is left waits for the next run. */
  maxBatches?: number;
}

export interface PruneResult {
  inbox: TablePruneResult;
  deadLetters: TablePruneResult;
  outbox: TablePruneResult;
  inboxCutoff: Date;
  deadLetterCutoff: Date;
  outboxCutoff: Date;
}

/** One retention run over the three tables, with cutoffs taken from the clock once. */
export async function pruneExpired(db: Db, now: () => Date, policy: RetentionPolicy, signal?: AbortSignal): Promise<PruneResult> {
  const at = now();
  const inboxCutoff = retentionCutoff(at, policy.inboxRetentionDays);
  const deadLetterCutoff = retentionCutoff(at, policy.deadLetterRetentionDays);
  const outboxCutoff = retentionCutoff(at, policy.outboxRetentionDays);
  const options = { batchSize: policy.batchSize, maxBatches: policy.maxBatches, signal };
  const { inbox, deadLetters } = await new InboxStore(db).prune({ inbox: inboxCutoff, deadLetters: deadLetterCutoff }, options);
  // Pending events are never pruned: published_at is NULL until the relay publishes them.
  const outbox = await pruneTable(db, { table: 'outbox', column: 'published_at' }, outboxCutoff, options);
  // Where the orders' locks are rows (MariaDB, MySQL), a row no order has locked since the inbox's cutoff
  // goes too: the order's records are gone, and a later lock of it inserts the row again.
  if (ddlOf(db).keyLockTable) await pruneTable(db, { table: KEY_LOCK_TABLE, column: 'locked_at' }, inboxCutoff, options);
  return { inbox, deadLetters, outbox, inboxCutoff, deadLetterCutoff, outboxCutoff };
}

/** A run's rows deleted per table, its cutoffs and whether it finished: what the admin route answers and the log says. */
export function pruneSummary(result: PruneResult) {
  return {
    inbox: result.inbox.deleted,
    deadLetters: result.deadLetters.deleted,
    outbox: result.outbox.deleted,
    inboxCutoff: result.inboxCutoff.toISOString(),
    deadLetterCutoff: result.deadLetterCutoff.toISOString(),
    outboxCutoff: result.outboxCutoff.toISOString(),
    complete: result.inbox.complete && result.deadLetters.complete && result.outbox.complete,
  };
}
