import { Type, type TSchema } from 'typebox';

/** One page of a keyset-paged list: its items, and the `after` of the next page (null on the last). */
export function pageSchema<T extends TSchema>(item: T) {
  return Type.Object({ items: Type.Array(item), nextAfter: Type.Union([Type.String(), Type.Null()]) }, { additionalProperties: false });
}
