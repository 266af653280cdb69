import { Type, type TSchema } from 'typebox';
import { ProblemError } from './problem.js';

/** One page of a keyset-paged list: its items, and the `after` of the next page (null on the last). */
export function pageSchema<T extends TSchema>(
  item: T,
  description = 'One page; nextAfter is the after of the next page, null on the last',
) {
  return Type.Object(
    { items: Type.Array(item), nextAfter: Type.Union([Type.String(), Type.Null()]) },
    { additionalProperties: false, description },
  );
}

/**
 * The instants a query may name: from 1970 to the end of 9999 (UTC). SQL Server's datetimeoffset ends
 * at 9999 and PostgreSQL refuses year 0 (22008); JavaScript reads a leap second as no date at all, and
 * PostgreSQL then refuses the statement (22007).
 */
const EARLIEST_MS = Date.UTC(1970, 0, 1);
const LATEST_MS = Date.UTC(9999, 11, 31, 23, 59, 59, 999);

/** An RFC 3339 time in 1970-9999 without a leap second; the schema of a time in a query string. */
export function instantSchema(description: string) {
  return Type.String({
    format: 'date-time',
    pattern: '^(19[7-9][0-9]|[2-9][0-9]{3})-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-5][0-9](\\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$',
    description: `${description} (RFC 3339, years 1970-9999, no leap second)`,
  });
}

/** The instant a time string names, or undefined when it is not one the databases can compare with. */
export function toInstant(value: string): Date | undefined {
  const ms = Date.parse(value);
  return ms >= EARLIEST_MS && ms <= LATEST_MS ? new Date(ms) : undefined;
}

/** The instant of a query parameter that passed instantSchema; a 400 when its offset moves it out of range. */
export function queryInstant(value: string, name: string): Date {
  const instant = toInstant(value);
  if (instant === undefined) throw new ProblemError('invalid-request', { detail: `${name} must be a time from 1970 to 9999 (UTC)` });
  return instant;
}
