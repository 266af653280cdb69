import { CompiledQuery } from 'kysely';

/**
 * PostgreSQL statements whose rows travel as one JSON array parameter instead of one parameter per
 * value. The text of such a statement depends on its table, columns and clauses only, not on how many
 * rows it carries: it is built once per shape and prepared once per connection (prepared-statements.ts),
 * and PostgreSQL plans it once, where a multi-row VALUES list is a new statement for every row count.
 * Binding one text costs the driver and the server less than binding hundreds of values, and the
 * statement is never rebuilt by the query builder on the hot path.
 *
 * Values: strings, numbers and booleans as JSON; Dates as ISO 8601 (timestamptz reads them exactly);
 * null as null. A JSON column's value is a JSON text (as the query builder is given it) and goes into
 * the array as that JSON itself, so the column receives the document, not a string holding it.
 */

/** Identifiers are the schema's own names; quoted as PostgreSQL quotes them. */
export function quoteIdentifier(identifier: string): string {
  return `"${identifier.replace(/"/g, '""')}"`;
}

/** One value as JSON; undefined when it has no faithful JSON form (the caller then builds the statement as usual). */
function jsonOf(value: unknown, isJson: boolean): string | undefined {
  if (value === null) return 'null';
  if (value instanceof Date) return `"${value.toISOString()}"`;
  switch (typeof value) {
    case 'string':
      return isJson ? value : JSON.stringify(value);
    case 'number':
      return Number.isFinite(value) ? String(value) : undefined;
    case 'boolean':
      return String(value);
    default:
      return undefined;
  }
}

/**
 * The rows as one JSON array of objects keyed by `columns`; undefined when a row does not give a value
 * to exactly these columns (the query builder writes DEFAULT where a row leaves a column out, which a
 * JSON record cannot say) or holds a value JSON cannot carry faithfully.
 */
export function jsonRows(rows: readonly object[], columns: readonly string[], json: ReadonlySet<string> = new Set()): string | undefined {
  const keys = columns.map((c) => `${JSON.stringify(c)}:`);
  const parts: string[] = [];
  for (const row of rows) {
    let defined = 0;
    for (const key in row) if ((row as Record<string, unknown>)[key] !== undefined) defined++;
    if (defined !== columns.length) return undefined;
    const fields: string[] = [];
    for (let i = 0; i < columns.length; i++) {
      const value = jsonOf((row as Record<string, unknown>)[columns[i]!], json.has(columns[i]!));
      if (value === undefined) return undefined;
      fields.push(keys[i]! + value);
    }
    parts.push(`{${fields.join(',')}}`);
  }
  return `[${parts.join(',')}]`;
}

/** The columns a set of rows gives values to: those of the first row that are not undefined. */
export function givenColumns(rows: readonly object[]): string[] {
  const [first] = rows;
  if (first === undefined) return [];
  return Object.entries(first)
    .filter(([, value]) => value !== undefined)
    .map(([column]) => column);
}

const insertTexts = new Map<string, string>();

export interface JsonInsertShape {
  readonly table: string;
  readonly columns: readonly string[];
  /** ON CONFLICT (these columns) DO NOTHING. */
  readonly conflict?: readonly string[] | undefined;
  /** RETURNING this column. */
  readonly returning?: string | undefined;
}

/**
 * INSERT INTO table (columns) SELECT columns FROM json_populate_recordset(NULL::table, $1): each value
 * is read as its column's type, and the rows are inserted in array order (so inserts that must take
 * their unique-index locks in key order still do).
 */
export function jsonInsertText(shape: JsonInsertShape): string {
  const key = `${shape.table}\u0000${shape.columns.join(',')}\u0000${shape.conflict?.join(',') ?? ''}\u0000${shape.returning ?? ''}`;
  let text = insertTexts.get(key);
  if (text === undefined) {
    const columns = shape.columns.map(quoteIdentifier).join(', ');
    text =
      `insert into ${quoteIdentifier(shape.table)} (${columns}) select ${columns} ` +
      `from json_populate_recordset(null::${quoteIdentifier(shape.table)}, cast($1 as json))` +
      (shape.conflict === undefined ? '' : ` on conflict (${shape.conflict.map(quoteIdentifier).join(', ')}) do nothing`) +
      (shape.returning === undefined ? '' : ` returning ${quoteIdentifier(shape.returning)}`);
    insertTexts.set(key, text);
  }
  return text;
}

/** The insert of `rows` as one JSON parameter, or undefined when the rows cannot travel as JSON (see jsonRows). */
export function jsonInsert(
  shape: Omit<JsonInsertShape, 'columns'>,
  rows: readonly object[],
  json?: ReadonlySet<string>,
): CompiledQuery | undefined {
  const columns = givenColumns(rows);
  if (columns.length === 0) return undefined;
  const parameter = jsonRows(rows, columns, json);
  if (parameter === undefined) return undefined;
  return CompiledQuery.raw(jsonInsertText({ ...shape, columns }), [parameter]);
}

/** A compiled query as what DeferredWrites and Kysely's executeQuery take. */
export function compiled(query: CompiledQuery): { compile(): CompiledQuery } {
  return { compile: () => query };
}
