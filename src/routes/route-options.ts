import { Type } from 'typebox';
import type { adminGuard } from '../http/admin-guard.js';

/** The onRequest hook guarding the admin routes (see http/admin-guard.ts), as the route modules pass it on. */
export type AdminGuard = ReturnType<typeof adminGuard>;

export const DateTime = Type.String({ format: 'date-time' });
export const NullableDateTime = Type.Union([DateTime, Type.Null()]);

/** The query of the admin lists that are not paged: at most `limit` items, 100 when it names none. */
export const LimitQuery = Type.Object(
  { limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 500, default: 100, description: 'At most this many' })) },
  { additionalProperties: false },
);
