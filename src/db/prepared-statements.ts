import pg from 'pg';

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

/** A pg client that runs parameterised statements as named prepared statements (see above). */
export class PreparingClient extends pg.Client {
  #generation = 0;

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
    if (typeof text === 'string' && Array.isArray(values) && values.length > 0 && callback === undefined) {
      const name = statementName(text);
      if (name !== undefined) {
        const generation = this.#generation;
        return super.query({ name: `${name}_${generation}`, text, values }).catch((error: unknown) => {
          if (isStalePlan(error) && this.#generation === generation) this.#generation++;
          return this.#dropIfReadOnly(error);
        });
      }
    }
    // eslint-disable-next-line @typescript-eslint/unbound-method -- applied with this client as `this`
    const result: unknown = Reflect.apply(super.query, this, args);
    return result instanceof Promise ? result.catch(this.#dropIfReadOnly) : result;
  }
}
