import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

/** Reading the published OpenAPI document the way a client generator or a validating proxy would. */

export const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'patch', 'options', 'head', 'trace'];

/**
 * The parts of an OpenAPI 3.1 document that the tests read. The document is generated JSON: these
 * types name what a test looks at, and its assertions check that it is there.
 */
export interface OpenApiDocument {
  openapi: string;
  info: { title: string; license?: { name: string; identifier?: string } };
  servers?: { url: string; description?: string }[];
  tags?: { name: string }[];
  paths: Record<string, PathItem>;
  components: { schemas: Record<string, JsonSchema> };
}

/** A path's operations by method (a path item's other fields are not read). */
export type PathItem = Partial<Record<string, OpenApiOperation>>;

export interface OpenApiOperation {
  operationId?: string;
  summary?: string;
  tags?: string[];
  security?: Record<string, string[]>[];
  parameters?: OpenApiParameter[];
  requestBody?: { content: Record<string, MediaType> };
  responses?: Record<string, OpenApiResponse>;
}

export interface OpenApiParameter {
  in: string;
  name: string;
  description?: string;
  required?: boolean;
  schema?: JsonSchema;
  example?: unknown;
  examples?: Record<string, { value?: unknown }>;
}

export interface OpenApiResponse {
  description?: string;
  headers?: Record<string, { description?: string }>;
  content?: Record<string, MediaType>;
}

export interface MediaType {
  schema?: JsonSchema;
  examples?: Record<string, OpenApiExample>;
}

export interface OpenApiExample {
  summary?: string;
  value?: unknown;
  /** Headers a request example needs (this service's extension). */
  'x-request-headers'?: Record<string, string>;
}

export type JsonSchema = Record<string, unknown>;

export interface Operation {
  method: string;
  path: string;
  op: OpenApiOperation;
}

/** Every operation, in document order. */
export function operations(doc: OpenApiDocument): Operation[] {
  return Object.entries(doc.paths).flatMap(([path, item]) =>
    Object.entries(item)
      .filter((entry): entry is [string, OpenApiOperation] => HTTP_METHODS.includes(entry[0]))
      .map(([method, op]) => ({ method, path, op })),
  );
}

/** A JSON pointer segment. */
function escape(segment: string): string {
  return segment.replaceAll('~', '~0').replaceAll('/', '~1');
}

/** Validates values against schemas of the document, by JSON pointer, with JSON Schema 2020-12 (OpenAPI 3.1's dialect). */
export function publishedValidator(doc: OpenApiDocument): (pointer: string[], value: unknown) => string[] {
  const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: true });
  addFormats.default(ajv);
  ajv.addSchema(doc, 'openapi.json');
  return (pointer, value) => {
    const validate = ajv.compile({ $ref: `openapi.json#/${pointer.map(escape).join('/')}` });
    return validate(value) ? [] : (validate.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message} ${JSON.stringify(e.params)}`);
  };
}

/** A path with its parameters replaced by their documented examples; throws when one has none. */
export function examplePath(path: string, op: OpenApiOperation): string {
  return path.replace(/\{([^}]+)\}/g, (_, name: string) => {
    const param = (op.parameters ?? []).find((p) => p.in === 'path' && p.name === name);
    const example = param?.example ?? Object.values(param?.examples ?? {})[0]?.value;
    if (example === undefined) throw new Error(`path parameter ${name} of ${path} has no example`);
    return encodeURIComponent(typeof example === 'string' ? example : JSON.stringify(example));
  });
}

export interface RequestExample {
  mediaType: string;
  name: string;
  value: unknown;
  headers: Record<string, string>;
}

/** The named request body examples of an operation, with the headers each one says it needs. */
export function requestExamples(op: OpenApiOperation): RequestExample[] {
  return Object.entries(op.requestBody?.content ?? {}).flatMap(([mediaType, media]) =>
    Object.entries(media.examples ?? {}).map(([name, example]) => ({
      mediaType,
      name,
      value: example.value,
      headers: example['x-request-headers'] ?? {},
    })),
  );
}
