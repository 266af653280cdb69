import type {
  CompiledQuery,
  Compilable,
  DialectAdapter,
  Kysely,
  QueryExecutorProvider,
  RawBuilder,
  SelectQueryBuilder,
  Transaction,
} from 'kysely';

/** What runs compiled statements: a Kysely instance or transaction, whatever its schema. */
export type StatementRunner = QueryExecutorProvider & Pick<Kysely<unknown>, 'executeQuery'>;

/**
 * A Kysely instance or one of its transactions, over the schema DB. Both are named so that a
 * transaction's schema is inferred: TypeScript does not infer Kysely's type argument from a Transaction.
 */
export type Queryable<DB> = Kysely<DB> | Transaction<DB>;

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- Kysely's own type for a schema it does not know
export type AnySchema = any;

/**
 * The schema-free view of a Kysely instance the engines build their statements on: Kysely's builders
 * cannot check a table or column name that is a type parameter, so the public signatures (statements.ts)
 * check them against the caller's schema instead.
 */
export type AnyDb = Kysely<AnySchema>;

/** A plain row: column names to values. */
export type Row = Record<string, unknown>;

/** A write handed to a WriteSink, and the rows it must change (checked when it runs), if any. */
export interface DeferredWrite {
  readonly query: Compilable;
  readonly expect: { readonly rows: number; readonly what: string } | undefined;
}

/** What takes a transaction's writes: DeferredWrites (deferred-writes.ts). */
export interface WriteSink {
  add(query: Compilable, expect?: { rows: number; what: string }): Promise<void>;
}

/**
 * A database engine: what the service needs to know of one SQL family, as named capabilities and
 * statement builders. One module per engine (postgres.ts, mssql.ts, mysql.ts) implements it; registry.ts picks the
 * engine of a Kysely instance by its dialect adapter. Nothing outside src/db asks which engine it runs
 * on: callers use the capabilities (src/db/statements.ts) and the failure kinds (src/db/failures.ts).
 */
export interface Engine {
  /** The engine's name, for logs and telemetry; never compared outside this folder. */
  readonly name: EngineName;
  /** Dialect adapters (and their subclasses) whose Kysely instances run on this engine. */
  readonly adapters: readonly (abstract new (...args: never[]) => DialectAdapter)[];
  /** OpenTelemetry's db.system.name and the older db.system for this engine. */
  readonly telemetry: { readonly systemName: string; readonly system: string };
  /** Most parameters one statement binds (see chunksWithin). */
  readonly maxParameters: number;
  /** Most rows one DELETE of deleteOldestRows takes; Infinity when the engine needs no bound. */
  readonly maxDeleteBatch: number;
  /** True when an INSERT or UPDATE can return columns (RETURNING); false when it says OUTPUT instead. */
  readonly supportsReturning: boolean;
  /** True when a list of keys binds as one array parameter (one statement text for any number of keys). */
  readonly bindsArrays: boolean;
  /** True when writes nothing reads back are held until flush and sent as one statement. */
  readonly defersWrites: boolean;
  /** Column types and DDL choices for migrations. */
  readonly ddl: Ddl;

  /** The failure kind one driver error stands for (errorsIn has split arrays and aggregates), if any. */
  failureOf(error: unknown): FailureKind | undefined;

  /** Runs deferred writes as one statement (more past the parameter limit); only when defersWrites. */
  runTogether(trx: StatementRunner, writes: readonly DeferredWrite[], options: { commit: boolean }): Promise<void>;

  insertIfAbsent(trx: AnyDb, table: string, row: Row, conflict: readonly string[]): Promise<boolean>;
  insertManyIfAbsent(trx: AnyDb, table: string, rows: readonly Row[], conflict: readonly string[], key: string): Promise<Set<string>>;
  insertManySkippingPresent(
    trx: AnyDb,
    table: string,
    rows: readonly Row[],
    conflict: readonly string[],
    writes: WriteSink | undefined,
    json: ReadonlySet<string> | undefined,
  ): Promise<void>;
  insertRows(trx: AnyDb, table: string, rows: readonly Row[], writes: WriteSink | undefined): Promise<void>;
  insertReturning(db: AnyDb, table: string, row: Row, column: string): Promise<unknown>;
  /** A query cut to its first `n` rows (LIMIT, or TOP). */
  firstRows<DB, TB extends keyof DB, O>(query: SelectQueryBuilder<DB, TB, O>, n: number): SelectQueryBuilder<DB, TB, O>;
  /** The oldest `limit` rows whose pending column is NULL, locked, skipping rows others hold. */
  lockNextPending(trx: AnyDb, table: string, pendingColumn: string, orderColumn: string, limit: number): Promise<Row[]>;
  /** A JSON text as a value for a JSON column where the column's type cannot be inferred (inside CASE). */
  jsonValue(text: string): RawBuilder<unknown>;
  /** Reads rows by key, locked for update until the transaction ends, in key order. */
  lockRows(trx: AnyDb, table: string, keyColumn: string, keys: readonly string[]): Promise<Row[]>;
  /** lockKeys, then lockRows; one statement where the engine allows. */
  lockRowsAfterKeyLocks(
    trx: AnyDb,
    resources: readonly string[],
    table: string,
    keyColumn: string,
    keys: readonly string[],
  ): Promise<Row[]>;
  /** Exclusive transaction-scoped locks on the resources (sorted, distinct), in their order. */
  lockKeys(trx: QueryExecutorProvider, resources: readonly string[]): Promise<void>;
  /** Deletes up to `n` of the oldest rows before `cutoff`, skipping rows others hold; the rows it removed. */
  deleteOldestRows(db: QueryExecutorProvider, table: string, column: string, cutoff: Date, n: number): Promise<number>;
  /**
   * Updates several rows chosen by key, each with values of its own, as writes each expected to change
   * every row it names (a statement, or one per parameter chunk). Texts are cached per `update` object.
   */
  updateByKey(trx: AnyDb, update: KeyedUpdate, rows: readonly KeyedValues[], bound: KeyedBound): { query: Compilable; rows: number }[];
  /**
   * Several tables' rows read by keys in one statement (UNION ALL, a `kind` column telling which part),
   * or undefined where the engine would need a statement per part and chunk: the caller reads the parts
   * with builders of its own. Texts are cached per `union` object.
   */
  unionByKeys(union: KeyedUnion, keys: readonly (readonly string[])[]): CompiledQuery | undefined;
  /**
   * A statement whose lists bind as one array parameter each (one text for any number of items), or
   * undefined where the engine does not bind arrays: the caller builds chunked IN lists instead.
   * The text is rendered once per `statement` object and cached.
   */
  listStatement(statement: ListStatement, parameters: readonly unknown[]): CompiledQuery | undefined;
  /** Why acknowledged commits could be lost in a failover (asynchronous standbys), if the engine can tell. */
  replicationWarning(db: QueryExecutorProvider): Promise<string | undefined>;
}

/**
 * A statement written without engine-specific syntax: `text` gets how this engine spells the n-th
 * parameter (from 1) and a match of a column against the n-th parameter bound as a list. Declared once,
 * as a constant.
 */
export interface ListStatement {
  readonly text: (spell: { readonly parameter: (n: number) => string; readonly inList: (n: number) => string }) => string;
}

export type EngineName = 'postgres' | 'mssql' | 'mysql';

/** What a database failure means to the service, whichever driver reported it. */
export type FailureKind =
  | 'duplicate'
  | 'lock-timeout'
  | 'deadlock'
  | 'serialization-conflict'
  | 'connection-lost'
  | 'read-only'
  /** Every pooled connection in use past the acquire timeout: overloaded, not down. */
  | 'busy';

/** Column types and DDL choices, one set per engine. */
export interface Ddl {
  uuid: string;
  timestamp: string;
  json: string;
  /**
   * Message ids, consumers and other keys: compared byte for byte. On SQL Server they are nvarchar
   * (Kysely binds every string parameter as nvarchar; against a varchar column SQL Server converts
   * the column, which under the default SQL_Latin1 collation turns key seeks into scans) with a binary
   * collation (the default collation is case-insensitive: `Order-1` and `order-1` would be one key).
   */
  key: (length: number) => string;
  text: (length: number) => string;
  /** A bigint filled from an ever-increasing sequence. */
  identity: string;
  /**
   * True when a table keyed by random ids clusters on an ever-increasing surrogate instead (SQL Server:
   * a clustered index on random keys fragments), the key kept as a nonclustered primary key.
   */
  clustersOnSurrogate: boolean;
  /** True when an index's name is scoped to its table (DROP INDEX … ON table). */
  indexNamesPerTable: boolean;
  /** True when an index can cover only the rows a WHERE clause selects (a filtered or partial index). */
  filteredIndexes: boolean;
  /** True when lockKeys locks rows of a table of its own (KEY_LOCK_TABLE), which the migrations create. */
  keyLockTable: boolean;
}

/**
 * An UPDATE of several rows chosen by `key`, its columns set in the order listed: from each row's own
 * values (`row`; `add`: added to the column), from one bound value for every row (`bound`), or NULL
 * (`null`); `where` columns must equal bound values. Declared once, as a constant: engines cache its
 * texts per object.
 */
export interface KeyedUpdate {
  readonly table: string;
  readonly key: { readonly column: string; readonly type: ValueType };
  readonly set: readonly SetColumn[];
  readonly where: readonly string[];
}

/** One column a KeyedUpdate sets. */
export type SetColumn =
  RowColumn | { readonly column: string; readonly from: 'bound' } | { readonly column: string; readonly from: 'null' };

/** A column set from each row's own value; `add`: added to the column's value. */
export interface RowColumn {
  readonly column: string;
  readonly from: 'row';
  readonly type: ValueType;
  readonly add?: boolean;
}

/** A generic column type, which each engine spells its own way. JSON values are given as JSON texts. */
export type ValueType = 'integer' | 'text' | 'uuid' | 'json';

/** One row of a KeyedUpdate: its key and its values for the `row` columns, in order. */
export interface KeyedValues {
  readonly key: string;
  readonly values: readonly unknown[];
}

/** A KeyedUpdate's bound values: for its `bound` and its `where` columns, in order. */
export interface KeyedBound {
  readonly set: readonly unknown[];
  readonly where: readonly unknown[];
}

/** A column of a KeyedUnion: its name and its generic type (for the parts that do not have it). */
export interface UnionColumn {
  readonly name: string;
  readonly type: 'integer' | 'text' | 'timestamp';
}

/** One part of a KeyedUnion: a table, its kind, its own columns, and which key list each matched column takes. */
export interface UnionPart {
  readonly table: string;
  readonly kind: string;
  readonly columns: readonly string[];
  /** Column name and the index of its key list in unionByKeys's `keys`. */
  readonly match: readonly (readonly [string, number])[];
}

/** Rows of several tables by keys: every part yields `kind` and all `columns` (NULL where it has none). */
export interface KeyedUnion {
  readonly columns: readonly UnionColumn[];
  readonly parts: readonly UnionPart[];
}
