import { hash, timingSafeEqual } from 'node:crypto';
import rateLimit from '@fastify/rate-limit';
import type { FastifyInstance, FastifyReply, FastifyRequest, HookHandlerDoneFunction, preValidationAsyncHookHandler } from 'fastify';
import fp from 'fastify-plugin';
import { Webhook, WebhookVerificationError } from 'standardwebhooks';
import type { Config } from '../config.js';
import { isLoopbackHost } from '../producer-config.js';
import { ProblemError } from './problem.js';

/** Who sent a command, once its credential was checked. */
export interface Producer {
  /** For logs and the rate limit. */
  readonly id: string;
  /** Its part of every inbox key it records; undefined: unscoped keys, as recorded before producers had ids. */
  readonly scope: string | undefined;
  /** Commands per window; undefined: not limited. */
  readonly rateLimitMax: number | undefined;
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The authenticated producer of a command request; undefined for anonymous commands. */
    producer: Producer | undefined;
  }
  interface FastifyInstance {
    /** The hooks every command route runs before its handler: authentication, then the rate limit. */
    producerHooks: ProducerHooks;
  }
}

export interface ProducerHooks {
  /** onRequest: the bearer token, or a refusal when the request carries no credential at all. */
  onRequest: ((request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction) => void)[];
  /** preValidation (the raw body is read): the webhook signature. */
  verify: preValidationAsyncHookHandler[];
  /** preValidation, once the producer is known and admitted: its rate limit. */
  rateLimit: preValidationAsyncHookHandler[];
  /** True when commands need a producer credential. */
  authenticated: boolean;
}

/** crypto.hash: one call, a third of createHash's cost for a short input. */
function digest(value: string): Buffer {
  return hash('sha256', value, 'buffer');
}

/** The WEBHOOK_SECRET sender: a producer with no id of its own, whose keys stay unscoped. */
const WEBHOOK_SECRET_PRODUCER = 'WEBHOOK_SECRET';

/**
 * The configured credentials, checked without revealing by timing which one (or which part of one)
 * matched: every API key digest is compared, in constant time, on every request.
 */
export class ProducerRegistry {
  readonly #apiKeys: { digest: Buffer; producer: Producer }[] = [];
  readonly #webhooks: { webhook: Webhook; producer: Producer }[] = [];

  constructor(config: Pick<Config, 'producers' | 'webhookSecret' | 'rateLimitMax'>) {
    const limit = (max: number | undefined) => max ?? (config.rateLimitMax === 0 ? undefined : config.rateLimitMax);
    for (const p of config.producers) {
      const producer: Producer = { id: p.id, scope: p.id, rateLimitMax: limit(p.rateLimitMax) };
      for (const hex of p.apiKeySha256) this.#apiKeys.push({ digest: Buffer.from(hex, 'hex'), producer });
      for (const secret of p.webhookSecrets) this.#webhooks.push({ webhook: new Webhook(secret), producer });
    }
    if (config.webhookSecret !== undefined) {
      const producer: Producer = { id: WEBHOOK_SECRET_PRODUCER, scope: undefined, rateLimitMax: limit(undefined) };
      this.#webhooks.push({ webhook: new Webhook(config.webhookSecret), producer });
    }
  }

  /** True when no credential is configured: commands are anonymous. */
  get empty(): boolean {
    return this.#apiKeys.length === 0 && this.#webhooks.length === 0;
  }

  get acceptsApiKeys(): boolean {
    return this.#apiKeys.length > 0;
  }

  get acceptsWebhooks(): boolean {
    return this.#webhooks.length > 0;
  }

  /** The producer whose API key this is, if any. */
  byApiKey(token: string): Producer | undefined {
    const presented = digest(token);
    let found: Producer | undefined;
    // No early exit: the time taken does not depend on which key matched.
    for (const { digest: expected, producer } of this.#apiKeys) {
      if (timingSafeEqual(presented, expected) && found === undefined) found = producer;
    }
    return found;
  }

  /** The producer one of whose secrets signed this delivery; throws invalid-signature when none did. */
  byWebhookSignature(request: FastifyRequest): Producer {
    const h = request.headers;
    const id = h['webhook-id'];
    const timestamp = h['webhook-timestamp'];
    const signature = h['webhook-signature'];
    if (typeof id !== 'string' || typeof timestamp !== 'string' || typeof signature !== 'string') {
      throw new ProblemError('invalid-signature', { detail: 'webhook-id, webhook-timestamp and webhook-signature headers are required' });
    }
    let firstError: WebhookVerificationError | undefined;
    for (const { webhook, producer } of this.#webhooks) {
      try {
        // jsonParse: false: the body parser has read the body already, and the verifier's own JSON.parse
        // throws (a 500) on what that parser accepts, such as a leading byte order mark.
        webhook.verify(
          request.rawBody ?? '',
          { 'webhook-id': id, 'webhook-timestamp': timestamp, 'webhook-signature': signature },
          { jsonParse: false },
        );
        return producer;
      } catch (error) {
        if (!(error instanceof WebhookVerificationError)) throw error;
        firstError ??= error;
      }
    }
    throw new ProblemError('invalid-signature', { detail: firstError?.message ?? 'No matching signature found' });
  }
}

const BEARER = /^Bearer[ \t]+([^\s]+)[ \t]*$/i;

function unauthenticated(registry: ProducerRegistry): ProblemError {
  if (!registry.acceptsApiKeys) {
    return new ProblemError('invalid-signature', { detail: 'webhook-id, webhook-timestamp and webhook-signature headers are required' });
  }
  return new ProblemError(
    'producer-unauthenticated',
    {
      detail: registry.acceptsWebhooks
        ? 'send Authorization: Bearer <API key>, or sign the delivery with a producer webhook secret'
        : 'send Authorization: Bearer <API key>',
    },
    { 'www-authenticate': 'Bearer' },
  );
}

/** The onRequest check: a bearer API key names the producer; a signed delivery waits for its body. */
function checkApiKey(registry: ProducerRegistry): ProducerHooks['onRequest'][number] {
  return (request, _reply, done) => {
    const authorization = request.headers.authorization;
    if (authorization !== undefined) {
      const token = BEARER.exec(authorization)?.[1];
      const producer = token === undefined ? undefined : registry.byApiKey(token);
      if (producer === undefined) {
        done(
          new ProblemError(
            'producer-unauthenticated',
            { detail: 'the bearer token is not a producer API key' },
            { 'www-authenticate': 'Bearer' },
          ),
        );
        return;
      }
      request.producer = producer;
      done();
      return;
    }
    // A signed delivery is checked once its body is read.
    if (registry.acceptsWebhooks && request.headers['webhook-signature'] !== undefined) done();
    else done(unauthenticated(registry));
  };
}

/**
 * The one rate limiter every command route shares (a producer's budget is shared by all of them), or
 * undefined when nobody is limited. Anonymous commands on loopback come from this machine: not
 * limited. Anywhere else (allowed deliberately) they are limited per client address.
 */
async function producerRateLimit(app: FastifyInstance, registry: ProducerRegistry): Promise<preValidationAsyncHookHandler | undefined> {
  const config = app.config;
  const anonymousMax = config.rateLimitMax === 0 || isLoopbackHost(config.host) ? undefined : config.rateLimitMax;
  const limitOf = (request: FastifyRequest) => (request.producer === undefined ? anonymousMax : request.producer.rateLimitMax);
  const anyLimit = registry.empty ? anonymousMax !== undefined : config.rateLimitMax > 0 || config.producers.some((p) => p.rateLimitMax);
  if (!anyLimit) return undefined;
  await app.register(rateLimit, {
    global: false,
    // No x-ratelimit-* headers on every answer; a refusal says Retry-After (set with the problem).
    addHeadersOnExceeding: { 'x-ratelimit-limit': false, 'x-ratelimit-remaining': false, 'x-ratelimit-reset': false },
    addHeaders: { 'x-ratelimit-limit': false, 'x-ratelimit-remaining': false, 'x-ratelimit-reset': false, 'retry-after': false },
  });
  return app.rateLimit({
    timeWindow: config.rateLimitWindowMs,
    max: (request) => limitOf(request) ?? Number.MAX_SAFE_INTEGER,
    allowList: (request) => limitOf(request) === undefined,
    keyGenerator: (request) => (request.producer === undefined ? `anonymous ${request.ip}` : request.producer.id),
    errorResponseBuilder: (request, context) => {
      const seconds = Math.max(1, Math.ceil(context.ttl / 1000));
      const who = request.producer === undefined ? 'this client' : `producer "${request.producer.id}"`;
      return new ProblemError(
        'rate-limited',
        { detail: `${who} sent more than ${context.max} commands in ${config.rateLimitWindowMs} ms`, retryAfterSeconds: seconds },
        { 'retry-after': String(seconds) },
      );
    },
  });
}

/**
 * Authentication and rate limits for command routes. With no credentials configured, commands are
 * anonymous and the routes get no hooks at all (config.ts allows that on loopback, or deliberately).
 * Otherwise a bearer API key is checked at onRequest, before the body is read; a webhook signature once
 * the raw body is there; then the producer's rate limit. A refusal is a 401 or 429 problem before the
 * handler runs: nothing is recorded.
 */
export const producerAuth = fp(
  async (app: FastifyInstance) => {
    const registry = new ProducerRegistry(app.config);
    app.decorateRequest('producer', undefined);
    const hooks: ProducerHooks = { onRequest: [], verify: [], rateLimit: [], authenticated: !registry.empty };
    if (!registry.empty) {
      hooks.onRequest.push(checkApiKey(registry));
      hooks.verify.push(async (request) => {
        request.producer ??= registry.byWebhookSignature(request);
      });
    }
    const limit = await producerRateLimit(app, registry);
    if (limit !== undefined) hooks.rateLimit.push(limit);
    app.decorate('producerHooks', hooks);
  },
  { name: 'producer-auth', dependencies: ['services'] },
);
