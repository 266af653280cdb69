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
 * onRequest guard for admin routes: `Authorization: Bearer <ADMIN_TOKEN>` when a token is configured
 * (compared in constant time), loopback clients only when none is.
 */
export function adminGuard(adminToken: string | undefined) {
  const expected = adminToken === undefined ? undefined : digest(adminToken);
  return async (request: FastifyRequest): Promise<void> => {
    if (expected === undefined) {
      if (!isLoopback(request.socket.remoteAddress ?? request.ip)) {
        throw new ProblemError('forbidden', { detail: 'set ADMIN_TOKEN to use admin routes from other hosts' });
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
