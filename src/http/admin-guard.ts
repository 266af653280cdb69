import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import { ProblemError } from './problem.js';

function digest(value: string): Buffer {
  return createHash('sha256').update(value, 'utf8').digest();
}

function isLoopback(address: string): boolean {
  return address === '::1' || address.startsWith('127.') || address.startsWith('::ffff:127.');
}

/**
 * A request a proxy forwarded: its peer is the proxy, so a loopback peer says nothing about the client.
 * nginx, HAProxy, Envoy and the like add one of these headers.
 */
function cameThroughProxy(request: FastifyRequest): boolean {
  const h = request.headers;
  return h['x-forwarded-for'] !== undefined || h.forwarded !== undefined || h['x-real-ip'] !== undefined;
}

/**
 * onRequest guard for admin routes: `Authorization: Bearer <ADMIN_TOKEN>` when a token is configured
 * (compared in constant time), loopback clients only when none is, and never a request that came
 * through a proxy. Producer credentials are not accepted here: admin is a separate role.
 */
export function adminGuard(adminToken: string | undefined) {
  const expected = adminToken === undefined ? undefined : digest(adminToken);
  return async (request: FastifyRequest): Promise<void> => {
    if (expected === undefined) {
      if (!isLoopback(request.socket.remoteAddress ?? request.ip)) {
        throw new ProblemError('forbidden', { detail: 'set ADMIN_TOKEN to use admin routes from other hosts' });
      }
      if (cameThroughProxy(request)) {
        throw new ProblemError('forbidden', {
          detail:
            'this request came through a proxy (X-Forwarded-For, Forwarded or X-Real-IP): set ADMIN_TOKEN to use admin routes through it',
        });
      }
      return;
    }
    const match = /^Bearer (.+)$/i.exec(request.headers.authorization ?? '');
    if (match?.[1] === undefined || !timingSafeEqual(digest(match[1]), expected)) {
      throw new ProblemError('unauthorized', { detail: 'missing or wrong bearer token' }, { 'www-authenticate': 'Bearer' });
    }
  };
}

export const adminSecurity = [{ adminToken: [] }];
