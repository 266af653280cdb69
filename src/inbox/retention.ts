import type { Kysely } from 'kysely';
import { deleteOldestRows, rowsPerDelete, type PrunableTable } from '../db/dialect.js';
import type { InboxDb } from './schema.js';

/**
 * Retention: completed inbox rows and dead letters are deleted once they are older than their
 * retention, in bounded batches (an application prunes its own tables the same way, with pruneTable). Each batch is one DELETE statement (one short transaction) that
 * skips rows other transactions hold, so a claim never waits long behind the pruner and several
 * instances pruning at once neither block each other nor delete (or count) a row twice.
 * In-progress inbox rows (completed_at NULL) are never pruned: they are settled, not forgotten.
 *
 * The consequence, by design: a copy of a message that arrives after its key was pruned is new to the
 * inbox and is processed again. Retention must outlast the longest redelivery a sender may make.
 */

export interface TablePruneResult {
  /** Rows the DELETEs of this run actually removed. */
  deleted: number;
  /** Rows removed by each batch, in order. */
  batches: number[];
  /** False when the run stopped (maxBatches reached, or asked to stop) with rows possibly still due. */
  complete: boolean;
}

/** Ten million rows per table per run at the default batch size: a bound, not a target. */
export const DEFAULT_MAX_BATCHES = 10_000;

const DAY_MS = 86_400_000;

/** The instant before which rows of a table kept `days` days are due for pruning. */
export function retentionCutoff(now: Date, days: number): Date {
  return new Date(now.getTime() - days * DAY_MS);
}

/** The moment until which a key completed at `completedAt` is remembered at least. */
export function keyRememberedUntil(completedAt: Date, retentionDays: number): Date {
  return new Date(completedAt.getTime() + retentionDays * DAY_MS);
}

export interface BatchOptions {
  batchSize: number;
  maxBatches?: number | undefined;
  /** Checked between batches: a shutdown stops the run after the batch in progress. */
  signal?: AbortSignal | undefined;
}

/**
 * Deletes rows of one table older than `cutoff`, batch after batch, until a batch comes back short
 * (nothing more is due, or the rest is held by another pruner), maxBatches is reached, or the signal aborts.
 */
export async function pruneTable<DB>(
  db: Kysely<DB>,
  target: PrunableTable<DB>,
  cutoff: Date,
  options: BatchOptions,
): Promise<TablePruneResult> {
  const maxBatches = options.maxBatches ?? DEFAULT_MAX_BATCHES;
  const batchSize = rowsPerDelete(db, options.batchSize);
  const batches: number[] = [];
  for (let i = 0; i < maxBatches; i++) {
    if (options.signal?.aborted) break;
    const deleted = await deleteOldestRows(db, target, cutoff, batchSize);
    if (deleted > 0) batches.push(deleted);
    if (deleted < batchSize) {
      return { deleted: sum(batches), batches, complete: true };
    }
  }
  return { deleted: sum(batches), batches, complete: false };
}

/** Deletes completed inbox rows that completed before `cutoff`; in-progress rows stay. */
export function pruneCompletedInbox(db: InboxDb, cutoff: Date, options: BatchOptions): Promise<TablePruneResult> {
  return pruneTable(db, { table: 'inbox', column: 'completed_at' }, cutoff, options);
}

/** Deletes dead letters received before `cutoff`. */
export function pruneDeadLetters(db: InboxDb, cutoff: Date, options: BatchOptions): Promise<TablePruneResult> {
  return pruneTable(db, { table: 'dead_letters', column: 'received_at' }, cutoff, options);
}

function sum(values: number[]): number {
  return values.reduce((a, b) => a + b, 0);
}
