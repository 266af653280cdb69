import type { onRequestHookHandler } from 'fastify';
import { ProblemError } from './problem.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** The command routes' first onRequest hook: the bound on commands in flight (commandAdmission). */
    commandAdmission: onRequestHookHandler;
  }
}

/**
 * A bound on the commands one replica holds over HTTP at once, checked as a request arrives, before its
 * body is read, parsed, validated or fingerprinted: past it the command is answered 503 `overloaded` with
 * Retry-After at once, nothing recorded. Under a flood of connections the inbox queue's own bound
 * (INBOX_QUEUE_LIMIT) comes too late to help: by then every refused request has cost as much as an
 * admitted one, and the admitted ones wait behind them. A command counts until its response has been
 * sent or its connection closed.
 */
export function commandAdmission(limit: number): onRequestHookHandler {
  let inFlight = 0;
  return function admit(_request, reply, done) {
    if (inFlight >= limit) {
      done(
        new ProblemError(
          'overloaded',
          {
            detail: `${limit} commands are in progress on this replica (HTTP_MAX_COMMANDS_IN_FLIGHT); retry shortly`,
            retryAfterSeconds: 1,
          },
          { 'retry-after': '1' },
        ),
      );
      return;
    }
    inFlight++;
    reply.raw.once('close', () => inFlight--);
    done();
  };
}
