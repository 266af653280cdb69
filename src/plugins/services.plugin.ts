import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { Config } from '../config.js';
import { createDatabase, type DatabaseHandle } from '../db/create-database.js';
import type { Db } from '../db/database.js';
import { migrateToLatest } from '../db/migrate.js';
import { DuplicateCache } from '../inbox/duplicate-cache.js';
import { CommandRunner } from '../inbox/command.js';
import { GroupCommitter } from '../inbox/group-commit.js';
import type { InboxCommand, InboxContext } from '../inbox/process-once.js';

/** Seams for tests; never set in production. */
export interface TestHooks {
  /** Runs inside a command's transaction, after its work, just before commit: delay it or throw. */
  beforeCommit?: (command: InboxCommand) => Promise<void>;
  /** Runs after an external side effect succeeded, before its outcome is recorded: throw to crash there. */
  afterSideEffect?: (command: InboxCommand) => Promise<void>;
}

export interface ServicesOptions {
  config: Config;
  /** A database opened by the caller (kept open on close); otherwise one is opened from config.databaseUrl. */
  database?: DatabaseHandle | undefined;
  now: () => Date;
  testHooks: TestHooks;
}

declare module 'fastify' {
  interface FastifyInstance {
    config: Config;
    database: DatabaseHandle;
    db: Db;
    now: () => Date;
    inboxContext: InboxContext;
    /** Completed inbox records in memory, answering copies without the database. */
    duplicateCache: DuplicateCache;
    /** Runs every command of every transport through the inbox (group commit or two-phase). */
    commands: CommandRunner;
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

/** Configuration, the database (migrated at start-up) and the inbox context, decorated once. */
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
    database.startupDone?.();

    app.decorate('config', config);
    app.decorate('database', database);
    app.decorate('db', database.db);
    app.decorate('now', options.now);
    app.decorate('testHooks', options.testHooks);
    const inboxContext = {
      db: database.db,
      lockTimeoutMs: config.inboxLockTimeoutMs,
      now: options.now,
      beforeCommit: options.testHooks.beforeCommit,
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
    } satisfies InboxContext;
    app.decorate('inboxContext', inboxContext);
    const duplicateCache = new DuplicateCache({ maxEntries: config.inboxCacheSize, ttlMs: config.inboxCacheTtlMs, now: options.now });
    app.decorate('duplicateCache', duplicateCache);
    const committer = new GroupCommitter(inboxContext, {
      maxBatch: config.inboxBatchMax,
      // PGlite runs one transaction at a time: a second slot would only wait for the first.
      concurrency: Math.min(config.inboxBatchConcurrency, database.maxConcurrentTransactions ?? Infinity),
      queueLimit: config.inboxQueueLimit,
      overloadRetryAfterSeconds: 1,
      cache: duplicateCache,
      // The metrics plugin registers after this one; these run only once commands flow.
      onBatch: (consumer, size) => app.metrics.recordBatch(consumer, size),
      onCacheHit: (consumer) => app.metrics.recordCacheHit(consumer),
    });
    app.decorate(
      'commands',
      new CommandRunner(inboxContext, committer, {
        leaseMs: config.inboxLeaseMs,
        queueLimit: config.inboxQueueLimit,
        overloadRetryAfterSeconds: 1,
        afterSideEffect: options.testHooks.afterSideEffect,
        onTakeOver: (command) =>
          app.log.warn(
            { consumer: command.consumer, messageId: command.key.messageId },
            'expired side effect performed again under the same idempotency key',
          ),
        onStaleAttempt: (command, attempt, record) =>
          app.log.warn(
            {
              consumer: command.consumer,
              messageId: command.key.messageId,
              attempt: attempt.number,
              recordAttempts: record?.attempts ?? null,
              recordState: record === undefined ? 'gone' : record.completedAt === null ? 'in-progress' : 'completed',
            },
            'a side-effect attempt found its inbox record taken over or settled meanwhile; it answers with the record as it is now',
          ),
      }),
    );
  },
  { name: 'services' },
);
