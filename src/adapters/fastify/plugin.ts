import type { FastifyInstance, FastifyReply, FastifyRequest, FastifySchemaCompiler } from 'fastify';
import fp from 'fastify-plugin';
import type { Kysely } from 'kysely';
import type { InboxContext, InboxResult } from '../../inbox/context.js';
import { DuplicateCache } from '../../inbox/duplicate-cache.js';
import type { FingerprintMismatchError } from '../../inbox/errors.js';
import { GROUP_COMMIT_DEFAULTS, GroupCommitter, type GroupCommitOptions } from '../../inbox/group-commit.js';
import type { CommandKind } from '../../inbox/kind.js';
import type { MessageKey } from '../../inbox/message-key.js';
import { keyRememberedUntil } from '../../inbox/retention.js';
import { CommandRunner, type CommandExecutor, type CommandRunnerOptions } from '../../inbox/runner.js';
import type { InboxTables } from '../../inbox/schema.js';
import { InboxStore } from '../../inbox/store.js';
import { buildValidatorCompiler } from '../../validation/compile.js';
import { registerCommandRoute, KEY_EXPIRES_HEADER, type CommandRouteOptions } from './command-endpoint.js';
import { INBOX_PROBLEMS, inboxProblem, inboxProblems, PROBLEM_MEDIA_TYPE, type ProblemLinks } from './problems.js';

/** A command executor that also tells what waits in it. */
export type ObservedExecutor = CommandExecutor & { readonly queued: number; readonly joined: number };

export interface InboxPluginOptions {
  /** The application's database; its schema holds the inbox tables (run `inboxMigrations` first). */
  db: Kysely<InboxTables>;
  /** The store over `db`, when the application decorates one (default: `new InboxStore(db)`). */
  store?: InboxStore;
  /**
   * The lock timeout `db`'s connections wait on a row (the application sets it on its pool): a copy waits
   * this long on another copy's uncommitted claim before it is told the message is in flight. Default 5000.
   */
  lockTimeoutMs?: number;
  now?: () => Date;
  /** Group commit: most messages per transaction (64), transactions per consumer (2), queued per consumer (512): GROUP_COMMIT_DEFAULTS. */
  batch?: Partial<Pick<GroupCommitOptions, 'maxBatch' | 'concurrency' | 'queueLimit' | 'balanceWaitMs'>>;
  /** Completed records kept in memory to answer copies (10,000, for 10 minutes); maxEntries 0 turns it off. */
  cache?: { maxEntries?: number; ttlMs?: number };
  /** How long a side effect's claim is presumed alive (30 s). */
  leaseMs?: number;
  /** Seconds advertised when refusing for overload (1). */
  overloadRetryAfterSeconds?: number;
  /** When set, 200 and 201 say until when the key is remembered (the application prunes after this many days). */
  keyRetentionDays?: number;
  /** Render inbox refusals as problem documents (default true); false leaves them to the application's error handler. */
  renderProblems?: boolean;
  /** Links the problem documents carry (operator routes of the application). */
  links?: ProblemLinks;
  /** Observers: metrics and logs. None may throw into the inbox: their errors are ignored where a commit happened. */
  observe?: {
    onBatch?: GroupCommitOptions['onBatch'];
    onCacheHit?: GroupCommitOptions['onCacheHit'];
    onFingerprintMismatch?: (error: FingerprintMismatchError) => void;
    onTakeOver?: CommandRunnerOptions['onTakeOver'];
    onStaleAttempt?: CommandRunnerOptions['onStaleAttempt'];
  };
  /** Wraps the executor the routes use (an application's test seams). */
  wrapExecutor?: (runner: CommandRunner) => ObservedExecutor;
}

/** What the plugin decorates the instance with. */
export interface InboxDecoration {
  readonly commands: ObservedExecutor;
  readonly store: InboxStore;
  readonly context: InboxContext;
  readonly cache: DuplicateCache;
  /** The OpenAPI problem responses of a command route. */
  readonly problemResponses: Record<number, unknown>;
  /** Declares a command route: POST `options.url` runs `kind` exactly once per message. */
  command(kind: CommandKind, options: CommandRouteOptions): void;
}

declare module 'fastify' {
  interface FastifyInstance {
    inbox: InboxDecoration;
  }
  interface FastifyRequest {
    /** The inbox key of the command this request carried, once it was read (for logs and metrics). */
    inboxKey: MessageKey | undefined;
    /** How the inbox settled the command: processed or duplicate (errors are told by the status). */
    inboxResult: InboxResult<unknown>['kind'] | undefined;
  }
  interface FastifyContextConfig {
    /** The consumer a command route feeds; absent on other routes. */
    consumer?: string;
  }
}

/** A body or header that does not match the route's schema, as Fastify reports it. */
function schemaProblem(error: unknown): ReturnType<typeof inboxProblem> {
  const validation = (error as { validation?: unknown; message?: unknown }).validation;
  if (!Array.isArray(validation)) return undefined;
  return { slug: 'invalid-request', detail: String((error as Error).message), fields: {}, headers: {} };
}

function sendInboxProblem(error: unknown, request: FastifyRequest, reply: FastifyReply, links: ProblemLinks): boolean {
  const found = inboxProblem(error, links) ?? schemaProblem(error);
  if (found === undefined) return false;
  const { status, title } = INBOX_PROBLEMS[found.slug];
  void reply
    .code(status)
    .headers(found.headers)
    .type(PROBLEM_MEDIA_TYPE)
    .send({ type: `/problems/${found.slug}`, title, status, detail: found.detail, instance: request.url.split('?')[0], ...found.fields });
  return true;
}

/**
 * The inbox for a Fastify application: after `app.register(inbox, { db })`, `app.inbox.command(kind,
 * { url })` makes POST `url` exactly-once per message (201 processed, 200 replayed, 409 in flight or
 * needs reconciliation, 422 key reused with another payload, 503 overloaded), documented in the
 * OpenAPI document when @fastify/swagger is registered.
 */
async function inboxPlugin(app: FastifyInstance, options: InboxPluginOptions): Promise<void> {
  const now = options.now ?? (() => new Date());
  const store = options.store ?? new InboxStore(options.db);
  const observe = options.observe ?? {};
  const lockTimeoutMs = options.lockTimeoutMs ?? 5000;
  const context: InboxContext = { store, lockTimeoutMs, now, onFingerprintMismatch: observe.onFingerprintMismatch };
  const cache = new DuplicateCache({ maxEntries: options.cache?.maxEntries ?? 10_000, ttlMs: options.cache?.ttlMs ?? 600_000, now });
  const overloadRetryAfterSeconds = options.overloadRetryAfterSeconds ?? 1;
  const batch = { ...GROUP_COMMIT_DEFAULTS, ...options.batch };
  const committer = new GroupCommitter(context, {
    ...batch,
    overloadRetryAfterSeconds,
    cache,
    onBatch: observe.onBatch,
    onCacheHit: observe.onCacheHit,
  });
  const runner = new CommandRunner(context, committer, {
    leaseMs: options.leaseMs ?? 30_000,
    queueLimit: batch.queueLimit,
    overloadRetryAfterSeconds,
    onTakeOver: observe.onTakeOver,
    onStaleAttempt: observe.onStaleAttempt,
  });
  const commands = options.wrapExecutor?.(runner) ?? runner;
  const validatorCompiler = commandValidatorCompiler(app);
  const decoration: InboxDecoration = {
    commands,
    store,
    context,
    cache,
    problemResponses: inboxProblems.responses(inboxProblems.slugs),
    command: (kind, routeOptions) => registerCommandRoute(app, kind, routeOptions, validatorCompiler),
  };
  app.decorate('inbox', decoration);
  app.decorateRequest('inboxKey', undefined);
  app.decorateRequest('inboxResult', undefined);
  if (!app.hasContentTypeParser('application/cloudevents+json')) {
    app.addContentTypeParser('application/cloudevents+json', { parseAs: 'string' }, app.getDefaultJsonParser('error', 'error'));
  }
  if (options.keyRetentionDays !== undefined) advertiseKeyRetention(app, options.keyRetentionDays);
  if (options.renderProblems !== false) {
    const links = options.links ?? {};
    app.setErrorHandler((error, request, reply) => {
      if (!sendInboxProblem(error, request, reply, links)) void reply.send(error);
    });
  }
}

/**
 * The validator of the command routes, whatever the application's own Ajv settings: a body is checked as
 * sent, never coerced ("2" is not 2) nor stripped of properties its schema does not allow, which are
 * refused (400) instead. Fastify's defaults do both, and the inbox would then fingerprint, record and
 * answer as a duplicate a payload the sender never sent. Headers are text on the wire: coerced. The
 * application's shared schemas (`app.addSchema`) are read when the routes are compiled, at start-up.
 */
function commandValidatorCompiler(app: FastifyInstance): FastifySchemaCompiler<unknown> {
  let compile: ReturnType<typeof buildValidatorCompiler> | undefined;
  return (route) => {
    compile ??= buildValidatorCompiler(app.getSchemas() as Parameters<typeof buildValidatorCompiler>[0]);
    return compile(route as Parameters<typeof compile>[0]);
  };
}

/**
 * Tells the sender of a command how long its key is remembered: the recorded outcome's completion
 * time plus the retention. A copy sent later may find the key pruned and be processed again.
 */
function advertiseKeyRetention(app: FastifyInstance, retentionDays: number): void {
  app.addHook('preSerialization', (request, reply, payload, done) => {
    if (request.routeOptions.config.consumer !== undefined && reply.statusCode < 300) {
      const processedAt = (payload as { processedAt?: unknown } | null)?.processedAt;
      if (typeof processedAt === 'string') {
        reply.header(KEY_EXPIRES_HEADER, keyRememberedUntil(new Date(processedAt), retentionDays).toUTCString());
      }
    }
    done(null, payload);
  });
}

export const inbox = fp(inboxPlugin, { name: 'inbox', fastify: '5.x' });
