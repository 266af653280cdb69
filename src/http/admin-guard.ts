import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import type { Config } from '../config.js';
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

/** What the admin guard reads of the configuration. */
export type AdminAccess = Pick<Config, 'adminToken' | 'host' | 'adminAllowedHosts'>;

/** A Host header's name without its port, lower case, without a trailing dot: `[::1]:3000` -> `[::1]`. */
function hostName(host: string): string {
  const lower = host.trim().toLowerCase();
  let name = lower;
  if (lower.startsWith('[')) {
    const end = lower.indexOf(']');
    if (end !== -1) name = lower.slice(0, end + 1);
  } else {
    const colon = lower.lastIndexOf(':');
    if (colon !== -1) name = lower.slice(0, colon);
  }
  return name.endsWith('.') ? name.slice(0, -1) : name;
}

/** The names of the loopback interface and of HOST (unless it is a wildcard address, which names nothing). */
function ownNames(host: string): Set<string> {
  const names = new Set(['localhost', '[::1]']);
  const configured = host.trim().toLowerCase();
  if (configured !== '' && configured !== '0.0.0.0' && configured !== '::' && configured !== '[::]') {
    names.add(configured.includes(':') && !configured.startsWith('[') ? `[${configured}]` : configured);
  }
  return names;
}

/**
 * True when the Host header names this service: a loopback name (localhost, 127.x.x.x, [::1]), HOST, or
 * an entry of ADMIN_ALLOWED_HOSTS (a name, which matches any port, or a name:port, which matches only
 * that). A page that reached the service through a name of its own (DNS rebinding) sends that name.
 */
function hostMatcher(access: AdminAccess): (host: string | undefined) => boolean {
  const names = ownNames(access.host);
  const withPort = new Set<string>();
  for (const entry of access.adminAllowedHosts) {
    if (hostName(entry) === entry) names.add(entry);
    else withPort.add(entry);
  }
  return (host) => {
    if (host === undefined || host === '') return false;
    const name = hostName(host);
    return names.has(name) || /^127(?:\.\d{1,3}){3}$/.test(name) || withPort.has(host.trim().toLowerCase());
  };
}

const SAFE_METHODS: ReadonlySet<string> = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * Why a state-changing request was sent by a page of another origin, or undefined when no browser said
 * so. A browser marks every request a page makes: Sec-Fetch-Site (cross-site, same-site, same-origin,
 * none) and, on a POST, Origin. Scripts and curl send neither, and are not refused for that.
 */
function crossSite(request: FastifyRequest): string | undefined {
  if (SAFE_METHODS.has(request.method)) return undefined;
  const site = request.headers['sec-fetch-site'];
  if (site === 'cross-site' || site === 'same-site') return `the browser says this request comes from a ${site} page (Sec-Fetch-Site)`;
  const origin = request.headers.origin;
  if (origin === undefined) return undefined;
  let originHost: string | undefined;
  try {
    const url = new URL(origin);
    originHost = url.protocol === 'http:' || url.protocol === 'https:' ? url.host.toLowerCase() : undefined;
  } catch {
    originHost = undefined;
  }
  if (originHost !== undefined && originHost === request.headers.host?.trim().toLowerCase()) return undefined;
  return `a page of ${origin} sent this request (Origin), not a page of this service`;
}

/**
 * onRequest guard for admin routes:
 * - without ADMIN_TOKEN: loopback clients only, never a request that came through a proxy, and only
 *   under one of the service's own names (Host), so a page reaching it by DNS rebinding is refused;
 * - with ADMIN_TOKEN: `Authorization: Bearer <ADMIN_TOKEN>` (compared in constant time), and the Host
 *   checked when ADMIN_ALLOWED_HOSTS lists the names;
 * - either way, a request that changes something is refused when a browser says a page of another origin
 *   sent it (Sec-Fetch-Site, Origin): the console, served by the service, is same-origin.
 * Producer credentials are not accepted here: admin is a separate role.
 */
export function adminGuard(access: AdminAccess) {
  const expected = access.adminToken === undefined ? undefined : digest(access.adminToken);
  const checkHost = expected === undefined || access.adminAllowedHosts.length > 0;
  const ownHost = hostMatcher(access);
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
    }
    if (checkHost && !ownHost(request.headers.host)) {
      const host = request.headers.host === undefined ? 'no Host header' : `Host ${request.headers.host}`;
      throw new ProblemError('untrusted-host', {
        detail: `${host}: not a name of this service (localhost, 127.0.0.1, [::1], HOST, or ADMIN_ALLOWED_HOSTS)`,
      });
    }
    const why = crossSite(request);
    if (why !== undefined) throw new ProblemError('cross-site-request', { detail: why });
    if (expected === undefined) return;
    const match = /^Bearer (.+)$/i.exec(request.headers.authorization ?? '');
    if (match?.[1] === undefined || !timingSafeEqual(digest(match[1]), expected)) {
      throw new ProblemError('unauthorized', { detail: 'missing or wrong bearer token' }, { 'www-authenticate': 'Bearer' });
    }
  };
}

export const adminSecurity = [{ adminToken: [] }];
