import { sql } from 'kysely';
import type { Db } from './database.js';

/**
 * Exactly-once across a failover needs every acknowledged commit on a standby before it is acknowledged:
 * with asynchronous replication a commit the old primary acknowledged (and the service answered 201 for)
 * can be missing on the promoted standby, so the command's effect vanishes, or a redelivery applies it
 * again. This reads, on PostgreSQL, whether the primary has standbys and none of them synchronous
 * (docs/scaling.md names the settings); undefined when there is nothing to warn about or no way to tell.
 */
export async function replicationWarning(db: Db, kind: string): Promise<string | undefined> {
  if (kind !== 'postgres') return undefined;
  const { rows } = await sql<{ standbys: number; visible: number; synchronous: number; names: string; commit: string; standby: boolean }>`
    select (select count(*) from pg_stat_replication)::int as standbys,
           (select count(sync_state) from pg_stat_replication)::int as visible,
           (select count(*) from pg_stat_replication where sync_state in ('sync', 'quorum'))::int as synchronous,
           current_setting('synchronous_standby_names') as names,
           current_setting('synchronous_commit') as commit,
           pg_is_in_recovery() as standby`.execute(db);
  const row = rows[0];
  if (row === undefined || row.standby || row.standbys === 0) return undefined;
  const risk = 'a commit acknowledged by this primary can be lost in a failover, and with it an acknowledged command';
  if (row.commit === 'off' || row.commit === 'local') {
    return `synchronous_commit is ${row.commit} on a primary with ${row.standbys} standby(s): ${risk}`;
  }
  // Without pg_read_all_stats the standbys' sync_state is hidden: then synchronous_standby_names tells.
  const noneSynchronous = row.names.trim() === '' || (row.visible > 0 && row.synchronous === 0);
  if (!noneSynchronous) return undefined;
  const why =
    row.names.trim() === '' ? 'synchronous_standby_names is empty' : `none of them is in synchronous_standby_names (${row.names})`;
  return `the primary has ${row.standbys} standby(s) but none synchronous (${why}): ${risk}`;
}
