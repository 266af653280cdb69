import { realpathSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import closeWithGrace from 'close-with-grace';
import type { FastifyInstance } from 'fastify';
import { buildApp } from './app.js';
import { ConfigError, loadConfig } from './config.js';
import { replicationWarning } from './db/replication.js';
import { startTracing, TracingConfigError, type Tracing } from './runtime/tracing.js';

/** The only file that listens: config -> buildApp -> listen, and a graceful close on signals. */

/**
 * On SIGTERM/SIGINT: stop accepting connections, let in-flight requests finish (each commits or
 * rolls back its own transaction), close the pool, exit 0. If that takes longer than graceMs, or on a
 * second signal, exit 1 at once: the database rolls back whatever transaction the dropped connection held.
 * An uncaught error closes the same way and exits 1.
 */
export function shutdownGracefully(app: FastifyInstance, graceMs: number, tracing?: Tracing): void {
  closeWithGrace({ delay: graceMs, logger: app.log }, async ({ signal, err }) => {
    if (err !== undefined) app.log.error({ err }, 'shutting down after an error');
    else app.log.info({ signal, graceMs }, 'shutting down: finishing in-flight requests');
    await app.close();
    // After the app: the last requests' and the relay's spans are sent before the process exits.
    await tracing?.shutdown().catch((error: unknown) => app.log.warn({ err: error }, 'tracing: spans not flushed at shutdown'));
    app.log.info('shut down: requests finished, database pool closed');
  });
}

async function main(): Promise<void> {
  let config;
  let tracing;
  try {
    config = loadConfig();
    // Before the app: its HTTP hooks and the inbox's spans are there only when a tracer provider is.
    tracing = startTracing();
  } catch (error) {
    if (error instanceof ConfigError || error instanceof TracingConfigError) {
      console.error(`configuration error: ${error.message}`);
      process.exit(2);
    }
    throw error;
  }

  const app = await buildApp({ config, releaseStartupMemory: true });
  if (tracing !== undefined) app.log.info(tracing.description);
  if (!app.producerHooks.authenticated) {
    app.log.warn(
      'no producer credentials (PRODUCER_API_KEYS, PRODUCER_WEBHOOK_SECRETS, PRODUCERS_FILE, WEBHOOK_SECRET): commands are accepted without authentication',
    );
  }
  shutdownGracefully(app, config.shutdownGraceMs, tracing);
  // Node's default accept backlog (511) makes a burst of new connections wait for TCP retransmits
  // (seconds) before the service even sees them; under a burst the queue limit should decide instead.
  await app.listen({ port: config.port, host: config.host, backlog: LISTEN_BACKLOG });
  app.log.info(startupLine(config.host, (app.server.address() as AddressInfo).port, config.databaseUrl));
  const replication = await replicationWarning(app.db).catch(() => undefined);
  if (replication !== undefined) app.log.warn(`${replication}; see docs/scaling.md`);
}

/** Pending connections the kernel may hold for accept (capped by net.core.somaxconn). */
const LISTEN_BACKLOG = 4096;

/** Where the database is, for people and logs: scheme and host or path, never user, password or options. */
export function describeDatabase(databaseUrl: string): string {
  if (databaseUrl.startsWith('pglite:')) {
    const where = databaseUrl.slice('pglite:'.length);
    return where === 'memory' ? 'pglite:memory (in memory, gone at exit)' : `pglite:${resolve(where)}`;
  }
  try {
    const url = new URL(databaseUrl);
    return `${url.protocol}//${url.host}${url.pathname}`;
  } catch {
    return `${databaseUrl.split(':')[0]}: (unreadable URL)`;
  }
}

/** An address as the host part of a URL: IPv6 in brackets. */
function urlHost(host: string): string {
  return host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
}

/**
 * The one start-up line: where the service listens (the HOST it was given), where its API documentation
 * is, which database it uses. On every interface (0.0.0.0, ::) the docs are named on loopback, an
 * address of this machine that answers.
 */
export function startupLine(host: string, port: number, databaseUrl: string): string {
  const everywhere = host === '0.0.0.0' || host === '::' || host === '[::]';
  const listening = `http://${urlHost(host)}:${port}`;
  const docs = `${everywhere ? `http://${host === '0.0.0.0' ? '127.0.0.1' : '[::1]'}:${port}` : listening}/docs`;
  return `listening on ${listening}${everywhere ? ' (every interface)' : ''}, API docs at ${docs}, database ${describeDatabase(databaseUrl)}`;
}

/** True when this module is the process's entry point (node dist/server.js, tsx src/server.ts), not an import. */
function isEntryPoint(): boolean {
  const entry = process.argv[1];
  if (entry === undefined) return false;
  // `node dist/server` (no extension) is an entry point too, so compare the paths without one.
  const bare = (path: string) => {
    let real = resolve(path);
    try {
      real = realpathSync(real);
    } catch {
      // not a file as written (extension left off): compare the path as given
    }
    return real.replace(/\.(ts|js|mjs)$/, '');
  };
  return bare(entry) === bare(fileURLToPath(import.meta.url));
}

if (isEntryPoint()) await main();
