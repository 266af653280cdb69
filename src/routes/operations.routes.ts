import type { FastifyInstance } from 'fastify';
import { sql } from 'kysely';
import { Type } from 'typebox';
import { pendingMigrations } from '../db/migrate.js';
import { problem, PROBLEM_PATH, PROBLEM_TYPES, problemResponses, ProblemError, type ProblemSlug } from './problem.js';

const Health = Type.Object({ status: Type.Literal('ok') }, { additionalProperties: false });

/** Liveness, readiness and the descriptions behind every problem `type`. */
export async function operationsRoutes(app: FastifyInstance): Promise<void> {
  app.get('/health/live', { schema: { tags: ['operations'], summary: 'The process is up', response: { 200: Health } } }, async () => ({
    status: 'ok' as const,
  }));

  app.get(
    '/health/ready',
    {
      schema: {
        tags: ['operations'],
        summary: 'The database answers and every migration is applied',
        response: { 200: Health, ...problemResponses(503) },
      },
    },
    async () => {
      try {
        await sql`select 1`.execute(app.db);
        const pending = await pendingMigrations(app.db);
        if (pending.length > 0) throw new Error(`pending migrations: ${pending.join(', ')}`);
      } catch (error) {
        throw new ProblemError('database-unavailable', { detail: error instanceof Error ? error.message : 'not ready', retryAfterSeconds: 2 }, { 'retry-after': '2' });
      }
      return { status: 'ok' as const };
    },
  );

  app.get(
    `${PROBLEM_PATH}:slug`,
    {
      schema: {
        tags: ['operations'],
        summary: 'What a problem type means',
        params: Type.Object({ slug: Type.String() }),
        response: {
          200: Type.Object({ type: Type.String(), title: Type.String(), status: Type.Integer(), description: Type.String() }),
          ...problemResponses(404),
        },
      },
    },
    async (request) => {
      const { slug } = request.params as { slug: string };
      if (!Object.hasOwn(PROBLEM_TYPES, slug)) throw new ProblemError('not-found', { detail: `no problem type ${slug}` });
      const known = PROBLEM_TYPES[slug as ProblemSlug];
      return { type: problem(slug as ProblemSlug).type, title: known.title, status: known.status, description: known.description };
    },
  );
}
