import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

/** Reading the published OpenAPI document the way a client generator or a validating proxy would. */

export const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'patch', 'options', 'head', 'trace'];

export interface Operation {
  method: string;
  path: string;
  op: any;
}

/** Every operation, in document order. */
export function operations(doc: any): Operation[] {
  return Object.entries(doc.paths as Record<string, Record<string, unknown>>).flatMap(([path, item]) =>
    Object.entries(item)
      .filter(([method]) => HTTP_METHODS.includes(method))
      .map(([method, op]) => ({ method, path, op })),
  );
}

/** A JSON pointer segment. */
function escape(segment: string): string {
  return segment.replaceAll('~', '~0').replaceAll('/', '~1');
}

/** Validates values against schemas of the document, by JSON pointer, with JSON Schema 2020-12 (OpenAPI 3.1's dialect). */
export function publishedValidator(doc: any): (pointer: string[], value: unknown) => string[] {
  const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: true });
  addFormats.default(ajv);
  ajv.addSchema(doc, 'openapi.json');
  return (pointer, value) => {
    const validate = ajv.compile({ $ref: `openapi.json#/${pointer.map(escape).join('/')}` });
    return validate(value) ? [] : (validate.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message} ${JSON.stringify(e.params)}`);
  };
}

/** A path with its parameters replaced by their documented examples; throws when one has none. */
export function examplePath(path: string, op: any): string {
  return path.replace(/\{([^}]+)\}/g, (_, name: string) => {
    const param = (op.parameters ?? []).find((p: any) => p.in === 'path' && p.name === name);
    const example = param?.example ?? Object.values(param?.examples ?? {})[0]?.['value' as never];
    if (example === undefined) throw new Error(`path parameter ${name} of ${path} has no example`);
    return encodeURIComponent(String(example));
  });
}

export interface RequestExample {
  mediaType: string;
  name: string;
  value: unknown;
  headers: Record<string, string>;
}

/** The named request body examples of an operation, with the headers each one says it needs. */
export function requestExamples(op: any): RequestExample[] {
  return Object.entries((op.requestBody?.content ?? {}) as Record<string, any>).flatMap(([mediaType, media]) =>
    Object.entries((media.examples ?? {}) as Record<string, any>).map(([name, example]) => ({
      mediaType,
      name,
      value: example.value,
      headers: (example['x-request-headers'] ?? {}) as Record<string, string>,
    })),
  );
}
