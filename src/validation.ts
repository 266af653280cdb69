import { AjvCompiler } from '@fastify/ajv-compiler';

/**
 * Bodies are validated strictly: no type coercion ("2" is not 2), unknown properties rejected by the
 * schemas' additionalProperties: false rather than silently stripped. Query strings, path parameters and
 * headers are text on the wire, so they are coerced to the schema's types.
 */
export function buildValidatorCompiler(externalSchemas: Record<string, unknown>) {
  const factory = AjvCompiler();
  const shared = { allErrors: false, useDefaults: true, removeAdditional: false as const, allowMatchingProperties: true };
  const strict = factory(externalSchemas as never, { customOptions: { ...shared, coerceTypes: false } } as never);
  const coercing = factory(externalSchemas as never, { customOptions: { ...shared, coerceTypes: true } } as never);
  return (route: { httpPart?: string | undefined }) => (route.httpPart === 'body' ? strict(route as never) : coercing(route as never));
}
