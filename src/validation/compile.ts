import { AjvCompiler, type Ajv, type RouteDefinition } from '@fastify/ajv-compiler';
import type { AnySchema, ErrorObject, ValidateFunction } from 'ajv';

/**
 * ajv-formats' `uuid` also accepts `urn:uuid:…`, which neither the PostgreSQL nor the SQL Server uuid
 * type reads (the statement failed: a 500). `uuid` here is the 36-character form the columns store.
 * onCreate runs after ajv-formats is added, so this definition is the one the schemas get.
 */
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
function strictUuid(ajv: Ajv): void {
  ajv.addFormat('uuid', UUID);
  // Named OpenAPI examples on a body schema (the document moves them to the media type): not validated.
  ajv.addKeyword('x-examples');
}

/**
 * Bodies are validated strictly: no type coercion ("2" is not 2), unknown properties rejected by the
 * schemas' additionalProperties: false rather than silently stripped. Query strings, path parameters and
 * headers are text on the wire, so they are coerced to the schema's types.
 */
export function buildValidatorCompiler(externalSchemas: Record<string, AnySchema>) {
  const factory = AjvCompiler();
  const shared = { allErrors: true, useDefaults: true, removeAdditional: false as const, allowMatchingProperties: true };
  const strict = factory(externalSchemas, { customOptions: { ...shared, coerceTypes: false }, onCreate: strictUuid });
  const coercing = factory(externalSchemas, { customOptions: { ...shared, coerceTypes: true }, onCreate: strictUuid });
  return (route: RouteDefinition) => (route.httpPart === 'body' ? strict(route) : coercing(route));
}

/** A body checked against its schema: the body itself, or why it does not match (one line per failure). */
export type BodyValidation<T> = { valid: true; body: T } | { valid: false; errors: string[] };

/** Checks a parsed body against the schema it was compiled from. */
export type BodyValidator<T> = (body: unknown) => BodyValidation<T>;

/**
 * Compiles body schemas for a transport other than HTTP (a queue's messages): validated as strictly as
 * an HTTP body, each failure described under `root` (`body/data/quantity must be integer`). `name`
 * identifies the schema's source (`amqp:<queue>`), as a route's URL does. The type T is what the
 * schema describes; the caller names it.
 */
export function bodyValidatorCompiler(): <T>(schema: AnySchema, name: string, root: string) => BodyValidator<T> {
  const compile = buildValidatorCompiler({});
  return <T>(schema: AnySchema, name: string, root: string): BodyValidator<T> => {
    const validate = compile({ schema, httpPart: 'body', method: 'POST', url: name }) as ValidateFunction<T>;
    return (body) => (validate(body) ? { valid: true, body } : { valid: false, errors: describeErrors(validate.errors, root) });
  };
}

function describeErrors(errors: ErrorObject[] | null | undefined, root: string): string[] {
  return (errors ?? []).map((e) =>
    e.params !== undefined && 'additionalProperty' in e.params
      ? `${root}${e.instancePath} must not have property "${String(e.params.additionalProperty)}"`
      : `${root}${e.instancePath} ${e.message ?? 'is invalid'}`,
  );
}
