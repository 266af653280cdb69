import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { sql } from 'kysely';
import { Type } from 'typebox';
import { pendingMigrations } from '../schema/migrate.js';
import { replicationWarning } from '../db/replication.js';
import { isProblemSlug, problem, PROBLEM_PATH, PROBLEM_TYPES, problemResponses, ProblemError } from '../http/problem.js';

const Health = Type.Object({ status: Type.Literal('ok') }, { additionalProperties: false });
const Live = { ...Health, description: 'The process serves HTTP' };
const Ready = Type.Object(
  {
    status: Type.Literal('ok'),
    detail: Type.Optional(
      Type.String({
        description:
          'Ready, with a warning: the PostgreSQL primary has standbys but none synchronous, so a failover can lose acknowledged commands (docs/scaling.md)',
      }),
    ),
  },
  { additionalProperties: false, description: 'The database answers and every migration is applied' },
);

/** A readiness probe that hangs is as bad as one that fails: give the database this long to answer. */
const READY_QUERY_TIMEOUT_MS = 3000;
const READY_RETRY_AFTER_SECONDS = 2;

class NotReadyError extends Error {
  override readonly name = 'NotReadyError';
}

async function within<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new NotReadyError(`${what} did not answer within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([work, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Liveness, readiness and the descriptions behind every problem `type`. */
export async function operationsRoutes(app: FastifyInstance): Promise<void> {
  registerLiveness(app);
  registerReadiness(app);
  registerIndex(app);
  registerProblemTypes(app);
}

/** GET /health/live: the process serves HTTP. */
function registerLiveness(app: FastifyInstance): void {
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  api.get(
    '/health/live',
    { schema: { operationId: 'live', tags: ['operations'], summary: 'The process is up', security: [], response: { 200: Live } } },
    async () => ({
      status: 'ok' as const,
    }),
  );
}

/** GET /health/ready: the database answers and every migration is applied. */
function registerReadiness(app: FastifyInstance): void {
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  let migrationsApplied = false;
  api.get(
    '/health/ready',
    {
      schema: {
        operationId: 'ready',
        tags: ['operations'],
        security: [],
        summary: 'The database answers and every migration is applied',
        description: 'Ready again without a restart once the database answers. 503 (database-unavailable, Retry-After) while it does not.',
        response: { 200: Ready, ...problemResponses('shutting-down', 'database-unavailable') },
      },
    },
    async (request) => {
      try {
        await within(sql`select 1`.execute(app.db), READY_QUERY_TIMEOUT_MS, 'the database');
        // Migrations only ever move forward while the process runs: once applied, a probe is one query.
        if (!migrationsApplied) {
          const pending = await within(pendingMigrations(app.db), READY_QUERY_TIMEOUT_MS, 'the database');
          if (pending.length > 0) throw new NotReadyError(`migrations not applied: ${pending.join(', ')}`);
          migrationsApplied = true;
        }
      } catch (error) {
        request.log.warn({ err: error }, 'not ready');
        // The driver's message names hosts and ports: it goes to the log, not to the open endpoint.
        const detail = error instanceof NotReadyError ? error.message : 'the database did not answer the readiness query';
        throw new ProblemError(
          'database-unavailable',
          { detail, retryAfterSeconds: READY_RETRY_AFTER_SECONDS },
          { 'retry-after': String(READY_RETRY_AFTER_SECONDS) },
        );
      }
      // Ready either way; a primary whose standbys are all asynchronous is said so (the warning is logged at start-up too).
      const warning = await within(replicationWarning(app.db), READY_QUERY_TIMEOUT_MS, 'the database').catch(() => undefined);
      return warning === undefined ? { status: 'ok' as const } : { status: 'ok' as const, detail: warning };
    },
  );
}

/** GET /: where the documentation is. */
function registerIndex(app: FastifyInstance): void {
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  // A person who opens the service's address is sent to its documentation; a program gets the links.
  api.get(
    '/',
    {
      schema: {
        operationId: 'index',
        tags: ['operations'],
        summary: 'Where the documentation is (a browser is redirected to /docs)',
        security: [],
        response: {
          200: Type.Object(
            { service: Type.String(), docs: Type.String(), openapi: Type.String(), health: Type.String() },
            { additionalProperties: false, description: 'Links to the API documentation and the readiness probe' },
          ),
          302: { description: 'A browser (Accept: text/html): Location /docs', type: 'null' },
        },
      },
    },
    async (request, reply) => {
      reply.header('link', '</docs>; rel="service-doc", </docs/json>; rel="service-desc"');
      if (/\btext\/html\b/.test(request.headers.accept ?? '')) return reply.redirect('/docs', 302);
      return { service: 'Bookstore Inventory', docs: '/docs', openapi: '/docs/json', health: '/health/ready' };
    },
  );
}

/** GET /problems/{slug}: what a problem type means. */
function registerProblemTypes(app: FastifyInstance): void {
  const api = app.withTypeProvider<TypeBoxTypeProvider>();
  api.get(
    `${PROBLEM_PATH}:slug`,
    {
      schema: {
        operationId: 'getProblemType',
        tags: ['operations'],
        summary: 'What a problem type means',
        security: [],
        params: Type.Object({
          slug: Type.String({ description: "The last segment of a problem's type", examples: ['idempotency-key-reused'] }),
        }),
        response: {
          200: Type.Object(
            { type: Type.String(), title: Type.String(), status: Type.Integer(), description: Type.String() },
            { description: 'The problem type: its title, status and what it means' },
          ),
          ...problemResponses('not-found'),
        },
      },
    },
    async (request) => {
      const { slug } = request.params;
      if (!isProblemSlug(slug)) throw new ProblemError('not-found', { detail: `no problem type ${slug}` });
      const known = PROBLEM_TYPES[slug];
      return { type: problem(slug).type, title: known.title, status: known.status, description: known.description };
    },
  );
}
