import type { DialectAdapter, QueryExecutorProvider } from 'kysely';
import type { Engine } from './engine.js';
import { mssql } from './mssql.js';
import { mariadb, mysql } from './mysql.js';
import { pglite, postgres } from './postgres.js';

/** Every engine the service runs on, most specific adapter first. A new engine is one module and one entry here. */
export const ENGINES: readonly Engine[] = [pglite, postgres, mssql, mariadb, mysql];

/** A Kysely instance whose dialect adapter no engine claims: the service does not guess its SQL. */
export class UnknownEngineError extends Error {
  override readonly name = 'UnknownEngineError';

  constructor(adapter: string) {
    super(`no database engine for Kysely's ${adapter}: the service runs on ${[...new Set(ENGINES.map((e) => e.name))].join(', ')}`);
  }
}

/** The engine of each dialect adapter: one per Kysely instance, shared by its transactions. */
const engines = new WeakMap<DialectAdapter, Engine>();

/** The engine a Kysely instance (or transaction) runs on, chosen once by its dialect adapter's class. */
export function engineOf(db: QueryExecutorProvider): Engine {
  const { adapter } = db.getExecutor();
  let engine = engines.get(adapter);
  if (engine === undefined) {
    engine = ENGINES.find((e) => e.adapters.some((a) => adapter instanceof a));
    if (engine === undefined) throw new UnknownEngineError(adapter.constructor.name);
    engines.set(adapter, engine);
  }
  return engine;
}
