import type { Kysely } from 'kysely';

/**
 * The W3C trace context of the command that caused each outbox event (`traceparent`, and `tracestate`
 * when the trace carries one), published with the event so its consumers continue the same trace. Null
 * for events written while tracing was off. ASCII by the W3C grammar, hence varchar on every engine;
 * `tracestate` is at most 32 members, which the specification bounds to 512 characters in practice.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('outbox').addColumn('trace_parent', 'varchar(55)').execute();
  await db.schema.alterTable('outbox').addColumn('trace_state', 'varchar(512)').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('outbox').dropColumn('trace_state').execute();
  await db.schema.alterTable('outbox').dropColumn('trace_parent').execute();
}
