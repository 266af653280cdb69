/**
 * The database layer's entry for the rest of the service: statements built by the engine the Kysely
 * instance runs on (statements.ts, engines/), deferred writes, and failures in the service's words
 * (failures.ts). Nothing outside src/db asks which engine it runs on.
 */
export type { Queryable, StatementRunner } from './engines/common.js';
export type { Ddl, FailureKind, KeyedBound, KeyedUnion, KeyedUpdate, KeyedValues, ListStatement } from './engines/engine.js';
export { DeferredWrites } from './deferred-writes.js';
export {
  databaseFailureOf,
  isConnectionFailure,
  isDatabaseBusy,
  isDeadlock,
  isLockTimeout,
  isPassingFailure,
  isPoolExhausted,
  isTransactionConflict,
  isUniqueViolation,
  retryOnceIfDeadlocked,
} from './failures.js';
export {
  bindsArrays,
  ddlOf,
  deleteOldestRows,
  firstRows,
  insertIfAbsent,
  insertManyIfAbsent,
  insertManySkippingPresent,
  insertReturning,
  insertRows,
  jsonValue,
  listStatement,
  lockKeys,
  lockNextPending,
  parameterChunks,
  rowsPerDelete,
  selectForUpdate,
  selectForUpdateAfterKeyLocks,
  telemetryOf,
  unionByKeys,
  updateByKey,
  type PrunableTable,
} from './statements.js';
export { ParseJsonColumnsPlugin } from './engines/mssql.js';
export { MYSQL_POOL_ACQUIRE_TIMEOUT } from './engines/mysql-errors.js';
export { KEY_LOCK_TABLE, MariadbAdapter, MariadbDialect } from './engines/mysql.js';
