import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import secureJson from 'secure-json-parse';

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

/** JSON and CloudEvents JSON parsers that keep the raw body and refuse prototype poisoning. */
export const bodyParsers = fp(
  async (app: FastifyInstance) => {
    app.decorateRequest('rawBody', undefined);
    app.removeContentTypeParser(['application/json']);
    const parse = (request: { rawBody: string | undefined }, body: string) => {
      request.rawBody = body;
      try {
        return secureJson.parse(body, undefined, { protoAction: 'error', constructorAction: 'error' });
      } catch (error) {
        throw new MalformedJsonError(error instanceof Error ? error.message : 'invalid JSON', { cause: error });
      }
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
