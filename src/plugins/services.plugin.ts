import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { Config } from '../config.js';
import { createDatabase, type DatabaseHandle } from '../schema/create-database.js';
import type { Db } from '../schema/database.js';
import { migrateToLatest } from '../schema/migrate.js';
import { type DuplicateCache, type InboxContext, InboxStore } from '../inbox/machinery.js';
import { inbox, type InboxPluginOptions, type ObservedExecutor } from '../adapters/fastify/index.js';
import { releaseStartupMemory } from '../runtime/startup-memory.js';
import { executorWithSeams } from './test-seams.js';

import type { TestHooks } from './test-seams.js';

export type { TestHooks };

export interface ServicesOptions {
  config: Config;
  /** A database opened by the caller (kept open on close); otherwise one is opened from config.databaseUrl. */
  database?: DatabaseHandle | undefined;
  now: () => Date;
  testHooks: TestHooks;
  /** At the end of start-up, collect its garbage and shrink the heap (src/runtime/startup-memory.ts). */
  releaseStartupMemory?: boolean | undefined;
}

declare module 'fastify' {
  interface FastifyInstance {
    config: Config;
    database: DatabaseHandle;
    db: Db;
    now: () => Date;
    inboxContext: InboxContext;
    /** The inbox's reads and writes (src/inbox/store.ts). */
    inboxStore: InboxStore;
    /** Completed inbox records in memory, answering copies without the database. */
    duplicateCache: DuplicateCache;
    /** Runs every command of every transport through the inbox (group commit or two-phase). */
    commands: ObservedExecutor;
    testHooks: TestHooks;
  }
}

/**
 * The error without what the driver hangs on it: pg-pool sets `error.client`, the whole connection
 * (kilobytes in the log, and its cancel secret key).
 */
function errorOnly(error: Error): Record<string, unknown> {
  const { code } = error as { code?: unknown };
  return { type: error.name, message: error.message, ...(code === undefined ? {} : { code }), stack: error.stack };
}

/** Configuration, the database (migrated at start-up) and the inbox (src/adapters/fastify), decorated once. */
export const services = fp(
  async (app: FastifyInstance, options: ServicesOptions) => {
    const { config } = options;
    const owned = options.database === undefined;
    const database =
      options.database ??
      (await createDatabase(config.databaseUrl, {
        lockTimeoutMs: config.inboxLockTimeoutMs,
        onPoolError: (error) => app.log.warn({ err: errorOnly(error) }, 'idle database connection failed'),
        createDatabase: config.databaseCreate,
        onWarning: (message) => app.log.warn(message),
      }));
    if (owned) app.addHook('onClose', async () => database.close());
    const applied = await migrateToLatest(database.db);
    if (applied.length > 0) app.log.info({ migrations: applied }, 'database migrated');
    // Start-up is over when every plugin and route is loaded: its garbage is collected, then the embedded
    // database's WebAssembly tier-up is switched back on (pglite.ts).
    app.addHook('onReady', async () => {
      if (options.releaseStartupMemory === true) releaseStartupMemory();
      database.startupDone?.();
    });

    app.decorate('config', config);
    app.decorate('database', database);
    app.decorate('db', database.db);
    app.decorate('now', options.now);
    app.decorate('testHooks', options.testHooks);
    await app.register(inbox, {
      db: database.db,
      store: new InboxStore(database.db, { beforeCommit: options.testHooks.beforeCommit }),
      lockTimeoutMs: config.inboxLockTimeoutMs,
      now: options.now,
      batch: {
        maxBatch: config.inboxBatchMax,
        // A database that runs one transaction at a time (PGlite) gets one slot: a second would only wait.
        concurrency: Math.min(config.inboxBatchConcurrency, database.maxConcurrentTransactions ?? Infinity),
        queueLimit: config.inboxQueueLimit,
        balanceWaitMs: config.inboxBatchBalanceWaitMs,
      },
      cache: { maxEntries: config.inboxCacheSize, ttlMs: config.inboxCacheTtlMs },
      leaseMs: config.inboxLeaseMs,
      keyRetentionDays: config.inboxRetentionDays,
      // The service's error handler renders every problem, the inbox's among them (src/http/error-handler.ts).
      renderProblems: false,
      observe: inboxObservers(app),
      wrapExecutor: (runner) => executorWithSeams(runner, options.testHooks),
    });
    app.decorate('inboxStore', app.inbox.store);
    app.decorate('inboxContext', app.inbox.context);
    app.decorate('duplicateCache', app.inbox.cache);
    app.decorate('commands', app.inbox.commands);
  },
  { name: 'services' },
);

/** The inbox's observers: the service's log and metrics. */
function inboxObservers(app: FastifyInstance): InboxPluginOptions['observe'] {
  return {
    // The metrics plugin registers after this one; these run only once commands flow.
    onBatch: (consumer, size) => app.metrics.recordBatch(consumer, size),
    onCacheHit: (consumer) => app.metrics.recordCacheHit(consumer),
    onFingerprintMismatch: (error) =>
      app.log.warn(
        {
          consumer: error.consumer,
          messageId: error.messageId,
          stored: error.storedFingerprint,
          received: error.receivedFingerprint,
          deadLetter: error.deadLetterId,
        },
        'idempotency key reused with a different payload; dead-lettered',
      ),
    onTakeOver: (delivery) =>
      app.log.warn(
        { consumer: delivery.consumer, messageId: delivery.key.messageId },
        'expired side effect performed again under the same idempotency key',
      ),
    onStaleAttempt: (delivery, attempt, record) =>
      app.log.warn(
        {
          consumer: delivery.consumer,
          messageId: delivery.key.messageId,
          attempt: attempt.number,
          recordAttempts: record?.attempts ?? null,
          recordState: record === undefined ? 'gone' : record.completedAt === null ? 'in-progress' : 'completed',
        },
        'a side-effect attempt found its inbox record taken over or settled meanwhile; it answers with the record as it is now',
      ),
  };
}
