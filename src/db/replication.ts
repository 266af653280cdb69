import type { QueryExecutorProvider } from 'kysely';
import { engineOf } from './engines/registry.js';

/**
 * Why commits this database acknowledges could be lost in a failover (a primary whose standbys are all
 * asynchronous, on PostgreSQL), or undefined when there is nothing to warn about or no way to tell.
 */
export function replicationWarning(db: QueryExecutorProvider): Promise<string | undefined> {
  return engineOf(db).replicationWarning(db);
}
