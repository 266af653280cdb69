import type { Compilable } from 'kysely';
import { checkRows, type DeferredWrite, type StatementRunner, type WriteSink } from './engines/common.js';
import type { Engine } from './engines/engine.js';
import { engineOf } from './engines/registry.js';

/**
 * Writes of one transaction that nothing in it reads back before it commits (the work's inserts and
 * updates, the inbox's completion), sent together where the engine defers writes (PostgreSQL: they wait
 * until flush() and then go as one statement, see Engine.runTogether); elsewhere each runs when added,
 * as a statement of its own. A write whose row count differs from the one it expects fails the
 * transaction. The parts of one statement all see the rows as they were before it: two pending writes
 * to the same row would not both take effect, so a caller defers at most one write per row between
 * flushes.
 */
export class DeferredWrites implements WriteSink {
  readonly #trx: StatementRunner;
  readonly #engine: Engine;
  #pending: DeferredWrite[] = [];

  constructor(trx: StatementRunner) {
    this.#trx = trx;
    this.#engine = engineOf(trx);
  }

  /** Adds a write (an INSERT or UPDATE without RETURNING); `expect` checks the rows it changes. */
  async add(query: Compilable, expect?: { rows: number; what: string }): Promise<void> {
    const write = { query, expect };
    if (this.#engine.defersWrites) this.#pending.push(write);
    else checkRows(write, Number((await this.#trx.executeQuery(query.compile())).numAffectedRows ?? 0n));
  }

  /**
   * Runs what is pending: one statement (more only past the parameter limit), each write's expected row
   * count checked by the statement itself, so nothing has to be read back before the commit. With
   * `commit`, the transaction ends with this statement: PreparingClient sends the COMMIT in the
   * statement's round trip (see COMMIT_WITH_STATEMENT), and the caller must not run anything in the
   * transaction after it.
   */
  async flush(options: { commit?: boolean } = {}): Promise<void> {
    const pending = this.#pending;
    this.#pending = [];
    if (!this.#engine.defersWrites || pending.length === 0) return;
    await this.#engine.runTogether(this.#trx, pending, { commit: options.commit === true });
  }
}
