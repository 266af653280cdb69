import pg from 'pg';
import { COMMIT_WITH_STATEMENT } from './engines/postgres.js';

/**
 * Named prepared statements for PostgreSQL. Kysely hands `pg` each statement as text plus parameters,
 * which `pg` sends as an unnamed statement: PostgreSQL parses and plans it again on every execution.
 * For the claim transaction that parse/plan work is about half of the server's CPU per message
 * (measured with pgbench: -M extended 0.8 ms, -M prepared 0.4 ms per transaction). This client names
 * each distinct parameterised statement, so every connection parses and plans it once.
 */

/** Kysely produces one text per query shape; past this many distinct texts, statements go unnamed. */
const MAX_NAMED_STATEMENTS = 500;
const names = new Map<string, string>();

function statementName(text: string): string | undefined {
  let name = names.get(text);
  if (name === undefined && names.size < MAX_NAMED_STATEMENTS) {
    name = `kysely_${names.size + 1}`;
    names.set(text, name);
  }
  return name;
}

/**
 * A prepared `SELECT *` whose table gained or lost a column (a migration by another instance) fails
 * with 0A000 "cached plan must not change result type", and would keep failing on that connection.
 * Such a failure moves the connection to a new generation of names, so the next execution prepares
 * the statement afresh; the one failed statement (and its transaction) surfaces as an error.
 */
function isStalePlan(error: unknown): boolean {
  return (
    typeof error === 'object' &&
    error !== null &&
    (error as { code?: unknown }).code === '0A000' &&
    /cached plan must not change result type/.test(String((error as { message?: unknown }).message))
  );
}

/** SQLSTATE 25006: a write on a server that is (now) a standby. */
function isReadOnlyServer(error: unknown): boolean {
  return typeof error === 'object' && error !== null && (error as { code?: unknown }).code === '25006';
}

/** The prepared BEGIN that goes out with a transaction's first statement (see PreparingClient). */
const BEGIN_STATEMENT = 'kysely_begin';

/** The COMMIT that goes out behind a transaction's last statement, prepared once per connection. */
const COMMIT_STATEMENT = 'kysely_commit';

/**
 * A named statement sent with the transaction's control statements around it, in one write and one round
 * trip: the connection's prepared BEGIN ahead of it (`begin`), a prepared COMMIT behind it (`commit`).
 * The extended protocol runs them in order up to the one Sync; a statement that fails makes the server
 * skip the rest, so the COMMIT never runs after a failed statement (the transaction is then open and
 * aborted, and Kysely's ROLLBACK ends it).
 */
class Pipelined extends pg.Query {
  readonly #begin: boolean;
  readonly #commit: 'no' | 'prepared' | 'parse';

  /** `commit`: none, the connection's prepared COMMIT, or that COMMIT parsed first (once per connection). */
  constructor(config: object, begin: boolean, commit: 'no' | 'prepared' | 'parse') {
    super(config as never);
    this.#begin = begin;
    this.#commit = commit;
  }

  // pg.Query#prepare sends the statement's Parse (when its connection has not parsed it yet), Bind,
  // Describe, then _getRows its Execute and Sync; the BEGIN goes before them, as a Bind and an Execute of
  // its own, and the COMMIT between the Execute and the Sync.
  prepare(connection: pg.Connection): void {
    if (this.#begin) {
      connection.bind({ portal: '', statement: BEGIN_STATEMENT, values: [] }, false);
      connection.execute({ portal: '' }, false);
    }
    (pg.Query.prototype as unknown as { prepare(c: pg.Connection): void }).prepare.call(this, connection);
  }

  _getRows(connection: pg.Connection, rows: number | undefined): void {
    if (this.#commit === 'no' || rows !== undefined) {
      (pg.Query.prototype as unknown as { _getRows(c: pg.Connection, r: number | undefined): void })._getRows.call(this, connection, rows);
      return;
    }
    const self = this as unknown as { portal: string };
    connection.execute({ portal: self.portal }, false);
    if (this.#commit === 'parse') connection.parse({ name: COMMIT_STATEMENT, text: 'commit', types: [] }, false);
    connection.bind({ portal: '', statement: COMMIT_STATEMENT, values: [] }, false);
    connection.execute({ portal: '' }, false);
    connection.sync();
  }
}

type Result = { command: string; rowCount: number | null; rows: unknown[] };

/** What a BEGIN, COMMIT or ROLLBACK that never needed to reach the server answers. */
function nothingSent(command: string): Result {
  return { command: command.toUpperCase(), rowCount: null, rows: [] };
}

/**
 * A pg client that runs parameterised statements as named prepared statements (see above), and sends a
 * transaction's BEGIN with its first statement: Kysely's `begin` is held back, and goes out as a Bind
 * and an Execute of a BEGIN prepared once per connection, ahead of the first statement's own messages,
 * in the same write and the same round trip (the extended protocol runs them in order up to the one
 * Sync, so the statement runs inside the transaction). A transaction then costs one round trip fewer:
 * one in seven for a single command's. A first statement that fails fails as it would after a BEGIN
 * of its own: the transaction is open and aborted, and Kysely rolls it back. A transaction that ends
 * before any statement sends nothing at all. A first statement that is not a prepared one (a simple
 * query) waits for a BEGIN of its own, as before.
 */
export class PreparingClient extends pg.Client {
  #generation = 0;
  /** Kysely began a transaction and no statement of it has gone out yet. */
  #beginHeld = false;
  /** This connection has prepared its BEGIN statement. */
  #beginPrepared = false;
  /** The last statement sent ended its transaction with a COMMIT of its own (COMMIT_WITH_STATEMENT). */
  #commitSent = false;
  /**
   * This connection has parsed its COMMIT statement. Set once a COMMIT sent with its Parse succeeded: after
   * a failed statement the server skips everything up to the Sync, that Parse too.
   */
  #commitPrepared = false;

  /**
   * A write refused as read-only means this connection leads to a standby (a failover demoted its
   * server, or a proxy's stale health check routed it there): it is closed, so the pool drops it on
   * release and the next transaction connects afresh, to the new primary.
   */
  #dropIfReadOnly = (error: unknown): never => {
    if (isReadOnlyServer(error)) void this.end().catch(() => {});
    throw error;
  };

  // One override for every overload of pg.Client#query: only `any` fits all of their return types.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  override query(...args: unknown[]): any {
    const [text, values, callback] = args;
    const bare = typeof text === 'string' && Array.isArray(values) && values.length === 0 && callback === undefined;
    if (this.#commitSent) {
      this.#commitSent = false;
      // The transaction's last statement carried its COMMIT: Kysely's own has nothing left to do. Anything
      // else (a ROLLBACK after that statement failed, which left the transaction open and aborted) is sent.
      if (bare && text === 'commit') return Promise.resolve(nothingSent('commit'));
    }
    if (bare && text === 'begin' && !this.#beginHeld) {
      this.#beginHeld = true;
      return Promise.resolve(nothingSent('begin'));
    }
    if (this.#beginHeld) {
      this.#beginHeld = false;
      if (bare && (text === 'commit' || text === 'rollback')) return Promise.resolve(nothingSent(text));
      // Not a prepared statement (or the BEGIN not prepared yet): a BEGIN of its own first, as before.
      const afterOwnBegin = () => this.#begin().then(() => this.query(...args) as Promise<unknown>);
      if (!this.#beginPrepared || typeof text !== 'string' || !Array.isArray(values) || values.length === 0 || callback !== undefined) {
        return afterOwnBegin();
      }
      return this.#named(text, values, true) ?? afterOwnBegin();
    }
    if (typeof text === 'string' && Array.isArray(values) && values.length > 0 && callback === undefined) {
      const named = this.#named(text, values, false);
      if (named !== undefined) return named;
    }
    // eslint-disable-next-line @typescript-eslint/unbound-method -- applied with this client as `this`
    const result: unknown = Reflect.apply(super.query, this, args);
    return result instanceof Promise ? result.catch(this.#dropIfReadOnly) : result;
  }

  /** A BEGIN of its own, as the prepared statement the next transactions send with their first statement. */
  async #begin(): Promise<void> {
    await super.query({ name: BEGIN_STATEMENT, text: 'begin', values: [] });
    this.#beginPrepared = true;
  }

  /** Runs a named prepared statement, after the held BEGIN when `afterBegin`; undefined past MAX_NAMED_STATEMENTS. */
  #named(text: string, values: unknown[], afterBegin: boolean): Promise<Result> | undefined {
    const name = statementName(text);
    if (name === undefined) return undefined;
    const generation = this.#generation;
    const config = { name: `${name}_${generation}`, text, values };
    const commit = text.startsWith(COMMIT_WITH_STATEMENT);
    let sent: Promise<Result>;
    if (afterBegin || commit) {
      this.#commitSent = commit;
      sent = new Promise<Result>((resolve, reject) => {
        const callback = (error: Error | undefined, result: Result | Result[]) => {
          if (error) return reject(error);
          // One result per command (BEGIN, the statement, COMMIT): the caller asked for the statement's.
          const results = Array.isArray(result) ? result : [result];
          const last = results[results.length - 1]!;
          // PostgreSQL answers a COMMIT of an aborted transaction with ROLLBACK (as Kysely checks).
          if (commit && last.command !== 'COMMIT')
            return reject(new Error(`COMMIT answered ${last.command}: the transaction was rolled back`));
          if (commit) this.#commitPrepared = true;
          resolve(results[afterBegin ? 1 : 0]!);
        };
        const withCommit = !commit ? 'no' : this.#commitPrepared ? 'prepared' : 'parse';
        super.query(new Pipelined({ ...config, callback }, afterBegin, withCommit) as never);
      });
    } else {
      sent = super.query(config);
    }
    return sent.catch((error: unknown) => {
      if (isStalePlan(error) && this.#generation === generation) this.#generation++;
      return this.#dropIfReadOnly(error);
    });
  }
}
