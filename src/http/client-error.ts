import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import type { ConnectionError, FastifyInstance } from 'fastify';
import type { LogLimiter } from './log-limiter.js';
import { problem, PROBLEM_MEDIA_TYPE, type ProblemDetails } from './problem.js';

/** The problem for an error Node's HTTP parser or its timers raised on a connection. */
function clientProblem(code: string | undefined): ProblemDetails {
  if (code === 'ERR_HTTP_REQUEST_TIMEOUT') return problem('request-timeout');
  if (code === 'HPE_HEADER_OVERFLOW') return problem('headers-too-large');
  return problem('bad-request', { detail: 'the request could not be parsed as HTTP/1.1' });
}

/**
 * Node's 'clientError': a request that timed out or could not be parsed, before any route or hook
 * ran. Fastify's default answers in its own JSON; this answers a problem document and closes the
 * connection, as Node does. Logged at info, at most one line per problem type a second (a slow-client
 * flood is many connections timing out at once).
 */
export function clientErrorHandler(limiter: LogLimiter) {
  // Fastify calls it bound to the instance, whose logger it uses.
  return function (this: FastifyInstance, error: ConnectionError, socket: Socket): void {
    // A reset connection is gone: nobody to answer.
    if (error.code === 'ECONNRESET' || socket.destroyed) return;
    const body = clientProblem(error.code);
    const suppressed = limiter.admit(body.type);
    if (suppressed !== undefined) {
      this.log.info(
        { problem: body.type, status: body.status, ...(suppressed > 0 ? { suppressed } : {}) },
        'request refused before it was read',
      );
    }
    answerAndClose(socket, body, error);
  };
}

/**
 * Writes a problem document straight to the connection and closes it: for a request whose reading is
 * given up (its body is not read to the end, so the connection cannot carry another request).
 */
export function answerAndClose(socket: Socket, body: ProblemDetails, error?: Error): void {
  if (socket.writable) {
    const text = JSON.stringify(body);
    socket.write(
      `HTTP/1.1 ${body.status} ${STATUS_CODES[body.status]}\r\nContent-Type: ${PROBLEM_MEDIA_TYPE}\r\n` +
        `Content-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`,
    );
  }
  socket.destroy(error);
}
