import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import secureJson from 'secure-json-parse';
import { ProblemError } from './problem.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The body exactly as received: webhook signatures are computed over these bytes. */
    rawBody: string | undefined;
  }
}

export class MalformedJsonError extends Error {
  override readonly name = 'MalformedJsonError';
  readonly statusCode = 400;
}

// NUL can only reach a parsed string through this escape; the scan below runs only when it is present.
const SUSPECT_NUL = /\\u0000/i;

/**
 * Where the first string (value or key) containing U+0000 sits, as a JSON pointer, if any.
 * Iterative, so a deeply nested body cannot overflow the stack.
 */
function findNul(root: unknown): string | undefined {
  const pending: { value: unknown; path: string }[] = [{ value: root, path: '' }];
  while (pending.length > 0) {
    const { value, path } = pending.pop()!;
    if (typeof value === 'string') {
      if (value.includes('\u0000')) return path;
    } else if (value !== null && typeof value === 'object') {
      for (const [key, child] of Object.entries(value)) {
        const childPath = `${path}/${key.replaceAll('~', '~0').replaceAll('/', '~1')}`;
        if (key.includes('\u0000')) return childPath;
        pending.push({ value: child, path: childPath });
      }
    }
  }
  return undefined;
}

/** The charset a Content-Type names, lower-cased, if any. */
function charsetOf(contentType: string | undefined): string | undefined {
  return /;\s*charset\s*=\s*"?([^";\s]+)"?/i.exec(contentType ?? '')?.[1]?.toLowerCase();
}

/** JSON is UTF-8 (RFC 8259): a body declared in another charset would be misread, so it is refused. */
function assertUtf8(request: FastifyRequest): void {
  const charset = charsetOf(request.headers['content-type']);
  if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8') {
    throw new ProblemError('unsupported-media-type', { detail: `JSON must be UTF-8; charset=${charset} is not accepted` });
  }
}

/** onRequest guard for routes whose body is plain JSON only (not a CloudEvent). */
export async function jsonBodyOnly(request: FastifyRequest): Promise<void> {
  const type = request.headers['content-type']?.split(';')[0]?.trim().toLowerCase();
  if (type !== undefined && type !== 'application/json') {
    throw new ProblemError('unsupported-media-type', { detail: `this route accepts application/json, not ${type}` });
  }
}

/**
 * Parses a command's JSON text as every transport must: prototype poisoning refused (MalformedJsonError),
 * and U+0000 in any string refused (ProblemError invalid-request, located under `root`).
 */
export function parseJsonBody(body: string, root: string): unknown {
  let parsed: unknown;
  try {
    parsed = secureJson.parse(body, undefined, { protoAction: 'error', constructorAction: 'error' });
  } catch (error) {
    throw new MalformedJsonError(error instanceof Error ? error.message : 'invalid JSON', { cause: error });
  }
  // PostgreSQL cannot store U+0000 in text and fails the statement (a 500); SQL Server would store it.
  // Refusing it here keeps every database's answer the same, and a client error a 400.
  const nulAt = SUSPECT_NUL.test(body) ? findNul(parsed) : undefined;
  if (nulAt !== undefined) {
    const location = `${root}${nulAt}`;
    throw new ProblemError('invalid-request', {
      detail: `${location} contains a NUL (U+0000) character, which no text field accepts`,
      errors: [{ location, message: 'must not contain U+0000' }],
    });
  }
  return parsed;
}

/**
 * JSON and CloudEvents JSON parsers that keep the raw body and refuse prototype poisoning.
 * They are the only parsers: any other media type (text/plain included) is a 415, not a body
 * that later fails the schema as a confusing 400.
 */
export const bodyParsers = fp(
  async (app: FastifyInstance) => {
    app.decorateRequest('rawBody', undefined);
    app.removeAllContentTypeParsers();
    const parse = (request: FastifyRequest, body: string) => {
      assertUtf8(request);
      request.rawBody = body;
      return parseJsonBody(body, 'body');
    };
    for (const type of ['application/json', 'application/cloudevents+json']) {
      app.addContentTypeParser(type, { parseAs: 'string' }, (request, body, done) => {
        try {
          done(null, parse(request, body as string));
        } catch (error) {
          done(error as Error, undefined);
        }
      });
    }
  },
  { name: 'body-parsers' },
);
