import Fastify, { LogController, type FastifyInstance, type FastifyServerOptions } from 'fastify';
import { loadConfig, type Config } from './config.js';
import type { DatabaseHandle } from './schema/create-database.js';
import { activeTracer, MESSAGE_ID_MAX_LENGTH } from './inbox/machinery.js';
import { activity } from './plugins/activity.plugin.js';
import { docs } from './plugins/docs.plugin.js';
import { messaging } from './plugins/messaging.plugin.js';
import { metrics } from './plugins/metrics.plugin.js';
import { requestLog } from './plugins/request-log.plugin.js';
import { retention } from './plugins/retention.plugin.js';
import { services, type TestHooks } from './plugins/services.plugin.js';
import { httpTracing } from './plugins/tracing.plugin.js';
import { bodyParsers } from './http/body-parsers.js';
import { clientErrorHandler } from './http/client-error.js';
import { LogLimiter } from './http/log-limiter.js';
import { commandAdmission } from './http/admission.js';
import { producerAuth } from './http/producer-auth.js';
import { errorHandler, renderError, sendProblem } from './http/error-handler.js';
import { ProblemError } from './http/problem.js';
import { inventoryRoutes } from './routes/inventory.routes.js';
import { notificationRoutes } from './routes/notifications.routes.js';
import { operationsRoutes } from './routes/operations.routes.js';
import { stockRoutes } from './routes/stock.routes.js';
import { consoleRoutes } from './routes/console/index.js';
import { deadLetterActionRoutes, deadLetterRoutes } from './routes/dead-letters/index.js';
import { inboxRoutes, pruneRoutes, recordEventRoutes, stuckRecordRoutes } from './routes/inbox/index.js';
import { outboxRoutes, relayRoutes } from './routes/outbox/index.js';
import { overviewRoutes } from './routes/overview/index.js';
import { buildValidatorCompiler } from './http/validation.js';

export const BODY_LIMIT_BYTES = 64 * 1024;

/** Response header on 200/201 command answers: the key is remembered at least until this HTTP-date. */
export { KEY_EXPIRES_HEADER } from './adapters/fastify/index.js';

export interface BuildAppOptions {
  /** Defaults to loadConfig(process.env); fields given here override it. */
  config?: Partial<Config>;
  /** A database the caller opened and will close; otherwise one is opened from config.databaseUrl. */
  database?: DatabaseHandle;
  /** The clock; tests inject one. */
  now?: () => Date;
  /** Pino options, or false for no logs. */
  logger?: FastifyServerOptions['logger'];
  /** Test seams (see TestHooks). */
  testHooks?: TestHooks;
  /**
   * Give back what start-up allocated once it is over (src/runtime/startup-memory.ts): one full,
   * memory-reducing collection. The server sets it; tests that build many apps leave it off.
   */
  releaseStartupMemory?: boolean;
}

/** Builds the service: plugins and routes in one visible order. It does not listen. */
export async function buildApp(options: BuildAppOptions = {}): Promise<FastifyInstance> {
  const config: Config = Object.freeze({ ...loadConfig(), ...options.config });
  const now = options.now ?? (() => new Date());
  const app = Fastify({
    logger: options.logger ?? { level: config.logLevel },
    bodyLimit: BODY_LIMIT_BYTES,
    // Start-up opens the database and migrates it; creating an embedded database on a busy machine can
    // take longer than Fastify's 10 s default for one plugin.
    pluginTimeout: 120_000,
    ajv: { customOptions: { coerceTypes: false } },
    schemaController: { compilersFactory: { buildValidator: buildValidatorCompiler as never } },
    // Requests arriving while closing get a 503 problem from closeConnectionsWhenClosing instead.
    return503OnClosing: false,
    forceCloseConnections: 'idle',
    // Every key the inbox accepts must be addressable under /inbox/{consumer}/{messageId}: Fastify's
    // default of 100 characters refused keys of 101-200 with a 414. Three times the longest key covers
    // one percent-encoded in full, whether the router counts encoded or decoded characters.
    routerOptions: { maxParamLength: 3 * MESSAGE_ID_MAX_LENGTH },
    // A client that trickles its headers or body holds a connection; past these it gets a 408 problem.
    requestTimeout: config.httpRequestTimeoutMs,
    http: httpServerOptions(config),
    clientErrorHandler: clientErrorHandler(new LogLimiter(1000, () => now().getTime())),
    // A URL Fastify cannot route (bad percent-encoding, an over-long path parameter) is answered before
    // any hook or error handler runs, in Fastify's own JSON: send it through the problem renderer too.
    frameworkErrors: (error, request, reply) => {
      void sendProblem(reply, renderError(error, request));
    },
    // request-log.plugin writes one line per request instead of Fastify's two.
    logController: new LogController({ disableRequestLogging: true }),
  });
  closeConnectionsWhenClosing(app);

  // First, so a request's server span covers every other hook; not even registered with tracing off.
  if (activeTracer() !== undefined) await app.register(httpTracing);
  await app.register(errorHandler);
  await app.register(bodyParsers);
  await app.register(services, {
    config,
    database: options.database,
    now,
    testHooks: options.testHooks ?? {},
    releaseStartupMemory: options.releaseStartupMemory,
  });
  await app.register(docs);
  // After docs, so /metrics is in the OpenAPI document; before the routes, so it sees every consumer.
  await app.register(metrics);
  await app.register(activity);
  await app.register(requestLog);
  await app.register(retention);
  await app.register(messaging, { maxBodyBytes: BODY_LIMIT_BYTES });
  // Before the command routes: they take the admission bound, then its authentication and rate-limit hooks.
  app.decorate(
    'commandAdmission',
    commandAdmission({
      limit: config.httpMaxCommandsInFlight,
      waitMs: config.httpAdmissionWaitMs,
      maxWaiting: config.httpMaxCommandsWaiting,
      unverifiedLimit: config.httpMaxUnverifiedCommands,
      unverifiedBodyTimeoutMs: config.httpUnverifiedBodyTimeoutMs,
    }),
  );
  await app.register(producerAuth);
  await registerRoutes(app);
  return app;
}

/**
 * The routes, grouped by resource under src/routes/. The OpenAPI document lists paths in registration
 * order, so they are registered in the order the API grew, resources interleaved, and the document stays put.
 */
async function registerRoutes(app: FastifyInstance): Promise<void> {
  await app.register(operationsRoutes);
  await app.register(stockRoutes);
  await app.register(inventoryRoutes);
  await app.register(notificationRoutes);
  await app.register(inboxRoutes);
  await app.register(pruneRoutes);
  await app.register(deadLetterRoutes);
  await app.register(outboxRoutes);
  await app.register(deadLetterActionRoutes);
  await app.register(overviewRoutes);
  await app.register(stuckRecordRoutes);
  await app.register(recordEventRoutes);
  await app.register(relayRoutes);
  await app.register(consoleRoutes);
}

/**
 * Node's timeouts for reading a request. Node notices a passed deadline only when it checks its
 * connections (every 30 s by default), so it checks at a fraction of the shorter timeout, at most
 * once a second.
 */
function httpServerOptions(config: Config) {
  const headersTimeout = Math.min(config.httpHeadersTimeoutMs, config.httpRequestTimeoutMs);
  return {
    requestTimeout: config.httpRequestTimeoutMs,
    headersTimeout,
    connectionsCheckingInterval: Math.max(10, Math.min(1000, Math.floor(headersTimeout / 4))),
  };
}

/**
 * Node's server.close() waits for keep-alive connections to go idle and time out (72 s in Fastify);
 * while closing, every response says Connection: close, so each in-flight request's connection ends
 * with its response and a graceful shutdown takes as long as the slowest request, not the keep-alive.
 * A request that arrives on an open connection after closing began is refused with a 503 problem:
 * nothing of it ran, so the sender can deliver it to another replica.
 */
function closeConnectionsWhenClosing(app: FastifyInstance): void {
  let closing = false;
  app.addHook('preClose', async () => {
    closing = true;
  });
  // Per-request hooks in callback style: an async hook costs a promise per request on the hot path.
  app.addHook('onRequest', (_request, _reply, done) => {
    if (closing) done(new ProblemError('shutting-down', { retryAfterSeconds: 1 }, { 'retry-after': '1' }));
    else done();
  });
  app.addHook('onSend', (_request, reply, payload, done) => {
    if (closing) reply.header('connection', 'close');
    done(null, payload);
  });
}
