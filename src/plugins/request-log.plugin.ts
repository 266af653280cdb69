import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { LogLimiter } from '../http/log-limiter.js';
import { isTurnedAway } from '../http/problem.js';
import { commandOutcome } from './metrics.plugin.js';

/** Polled by orchestrators and Prometheus every few seconds: logged at debug, not info. */
const QUIET_PATHS = new Set(['/health/live', '/health/ready', '/metrics']);

/** Turned-away 503s: at most one line per problem type in this long. */
const TURNED_AWAY_WINDOW_MS = 1000;

type Level = 'error' | 'warn' | 'info' | 'debug';

/** The request's one line, without its level. */
function lineOf(request: FastifyRequest, reply: FastifyReply): { msg: string; line: Record<string, unknown> } {
  const durationMs = Math.round(reply.elapsedTime * 10) / 10;
  const consumer = request.routeOptions.config.consumer;
  const status = reply.statusCode;
  if (consumer !== undefined) {
    const line = {
      consumer,
      messageId: request.inboxKey?.messageId,
      keySource: request.inboxKey?.source,
      result: commandOutcome(request, reply),
      problem: request.problemType,
      status,
      durationMs,
    };
    return { msg: 'command', line };
  }
  const path = request.url.split('?')[0] ?? request.url;
  return { msg: 'request', line: { method: request.method, path, status, problem: request.problemType, durationMs } };
}

function levelOf(request: FastifyRequest, status: number, msg: string, path: unknown): Level {
  if (status >= 500) return isTurnedAway(request.problemType) ? 'warn' : 'error';
  if (msg === 'request' && QUIET_PATHS.has(path as string) && status < 400) return 'debug';
  return 'info';
}

/**
 * One log line per request, written when the response is sent (Fastify's own two lines per request
 * are turned off in app.ts). A command's line carries consumer, messageId, key source, result, problem
 * type, status and duration. Never the body: payloads hold customer data (email addresses).
 * Turned-away 503s (overloaded, shutting-down, database-busy) are warn lines, at most one per type a
 * second; the next one written carries `suppressed`, the count left out since the last.
 */
export const requestLog = fp(
  async (app: FastifyInstance) => {
    const limiter = new LogLimiter(TURNED_AWAY_WINDOW_MS, () => app.now().getTime());
    // Callback style: an async hook costs a promise per request.
    app.addHook('onResponse', (request, reply, done) => {
      const { msg, line } = lineOf(request, reply);
      const level = levelOf(request, reply.statusCode, msg, line.path);
      if (level === 'warn' && request.problemType !== undefined) {
        const suppressed = limiter.admit(request.problemType);
        if (suppressed === undefined) {
          done();
          return;
        }
        if (suppressed > 0) line.suppressed = suppressed;
      }
      request.log[level](line, msg);
      done();
    });
  },
  { name: 'request-log' },
);
