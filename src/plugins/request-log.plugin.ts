import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { commandOutcome } from './metrics.plugin.js';

/** Polled by orchestrators and Prometheus every few seconds: logged at debug, not info. */
const QUIET_PATHS = new Set(['/health/live', '/health/ready', '/metrics']);

/**
 * One log line per request, written when the response is sent (Fastify's own two lines per request
 * are turned off in app.ts). A command's line carries consumer, messageId, key source, result, problem
 * type, status and duration. Never the body: payloads hold customer data (email addresses).
 */
export const requestLog = fp(
  async (app: FastifyInstance) => {
    // Callback style: an async hook costs a promise per request.
    app.addHook('onResponse', (request, reply, done) => {
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
        if (status >= 500) request.log.error(line, 'command');
        else request.log.info(line, 'command');
        done();
        return;
      }
      const path = request.url.split('?')[0] ?? request.url;
      const line = { method: request.method, path, status, problem: request.problemType, durationMs };
      if (status >= 500) request.log.error(line, 'request');
      else if (QUIET_PATHS.has(path) && status < 400) request.log.debug(line, 'request');
      else request.log.info(line, 'request');
      done();
    });
  },
  { name: 'request-log' },
);
