import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { MalformedJsonError, NulCharacterError, parseJson } from '../json/parse-json.js';
import { ProblemError } from './problem.js';

export { MalformedJsonError };

declare module 'fastify' {
  interface FastifyRequest {
    /** The body exactly as received: webhook signatures are computed over these bytes. */
    rawBody: string | undefined;
  }
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
 * Parses a command's JSON text as every transport must (see parseJson), a refusal in HTTP's terms:
 * prototype poisoning is a MalformedJsonError, U+0000 in any string a ProblemError invalid-request
 * (located under `root`).
 */
export function parseJsonBody(body: string, root: string): unknown {
  try {
    return parseJson(body, root);
  } catch (error) {
    if (!(error instanceof NulCharacterError)) throw error;
    throw new ProblemError('invalid-request', {
      detail: error.message,
      errors: [{ location: error.location, message: 'must not contain U+0000' }],
    });
  }
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
