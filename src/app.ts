import Fastify, { type FastifyInstance, type FastifyServerOptions } from 'fastify';
import { loadConfig, type Config } from './config.js';
import type { DatabaseHandle } from './db/create-database.js';
import { docs } from './plugins/docs.plugin.js';
import { services, type TestHooks } from './plugins/services.plugin.js';
import { bodyParsers } from './routes/body-parsers.js';
import { commandRequests } from './routes/command-route.js';
import { deadLetterRoutes } from './routes/dead-letters.routes.js';
import { errorHandler } from './routes/error-handler.js';
import { inboxRoutes } from './routes/inbox.routes.js';
import { inventoryRoutes } from './routes/inventory.routes.js';
import { notificationRoutes } from './routes/notifications.routes.js';
import { operationsRoutes } from './routes/operations.routes.js';
import { stockRoutes } from './routes/stock.routes.js';
import { buildValidatorCompiler } from './validation.js';

export const BODY_LIMIT_BYTES = 64 * 1024;

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
}

/** Builds the service: plugins and routes in one visible order. It does not listen. */
export async function buildApp(options: BuildAppOptions = {}): Promise<FastifyInstance> {
  const config: Config = Object.freeze({ ...loadConfig(), ...options.config });
  const app = Fastify({
    logger: options.logger ?? { level: config.logLevel },
    bodyLimit: BODY_LIMIT_BYTES,
    ajv: { customOptions: { coerceTypes: false } },
    schemaController: { compilersFactory: { buildValidator: buildValidatorCompiler as never } },
    return503OnClosing: true,
    forceCloseConnections: 'idle',
  });

  await app.register(errorHandler);
  await app.register(bodyParsers);
  await app.register(commandRequests);
  await app.register(services, {
    config,
    database: options.database,
    now: options.now ?? (() => new Date()),
    testHooks: options.testHooks ?? {},
  });
  await app.register(docs);
  await app.register(operationsRoutes);
  await app.register(stockRoutes);
  await app.register(inventoryRoutes);
  await app.register(notificationRoutes);
  await app.register(inboxRoutes);
  await app.register(deadLetterRoutes);
  return app;
}
