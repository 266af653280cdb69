import { isLoopbackHost, loadProducers, ProducerConfigError, isWebhookSecret, type ProducerConfig } from './producer-config.js';
import { GROUP_COMMIT_DEFAULTS, isValidProducerId, PRODUCER_ID_PATTERN } from './inbox/machinery.js';
import { AMQP_CONSUMER_DEFAULTS } from './adapters/amqp/index.js';
import { QUEUED_KINDS } from './command-kinds.js';

/** Environment -> validated, frozen configuration. Fails fast with a message naming the variable. */

export type EmailProviderKind = 'log' | 'http';

export interface Config {
  readonly port: number;
  readonly host: string;
  readonly databaseUrl: string;
  /** SQL Server: create the database at start-up when it is missing (needs CREATE DATABASE on master). */
  readonly databaseCreate: boolean;
  readonly adminToken: string | undefined;
  /**
   * Host names (with an optional port) the admin routes answer to besides the loopback names and HOST
   * (ADMIN_ALLOWED_HOSTS): a request naming any other Host is refused, so DNS rebinding gets nowhere.
   */
  readonly adminAllowedHosts: readonly string[];
  /**
   * A Standard Webhooks secret for the one sender that signed deliveries before producers had ids: its
   * keys stay unscoped, as they were recorded (see docs/security.md).
   */
  readonly webhookSecret: string | undefined;
  /** Producers and their credentials (PRODUCER_API_KEYS, PRODUCER_WEBHOOK_SECRETS, PRODUCERS_FILE). */
  readonly producers: readonly ProducerConfig[];
  /** Accept unauthenticated commands on a non-loopback address (ALLOW_ANONYMOUS_COMMANDS). */
  readonly allowAnonymousCommands: boolean;
  /** Commands one producer may send per window; 0 turns the limit off. */
  readonly rateLimitMax: number;
  readonly rateLimitWindowMs: number;
  /** The producer whose key space the AMQP command queues record in; unset: unscoped keys. */
  readonly amqpProducer: string | undefined;
  readonly inboxLockTimeoutMs: number;
  readonly inboxLeaseMs: number;
  readonly inboxRetentionDays: number;
  readonly deadLetterRetentionDays: number;
  /** Most commands one transaction commits (group commit); 1 turns batching off. */
  readonly inboxBatchMax: number;
  /** Transactions one consumer may have in flight at once; commands arriving meanwhile queue for the next. */
  readonly inboxBatchConcurrency: number;
  /**
   * How long queued commands may wait for a transaction in flight rather than start a smaller one beside
   * it; 0 starts a free slot with whatever is queued.
   */
  readonly inboxBatchBalanceWaitMs: number;
  /** Commands one consumer may have queued; past it a command gets 503 overloaded, nothing recorded. */
  readonly inboxQueueLimit: number;
  /** Commands one replica holds over HTTP at once; past it a command gets 503 overloaded before its body is read. */
  readonly httpMaxCommandsInFlight: number;
  /** How long a command past httpMaxCommandsInFlight may wait, unread, for a place; then 503 overloaded. 0: refused at once. */
  readonly httpAdmissionWaitMs: number;
  /** Commands that may wait for a place at once; past it the one that waited longest is refused. */
  readonly httpMaxCommandsWaiting: number;
  /**
   * Signed deliveries one replica reads at once before their signature is checked (it needs the body);
   * past it 503 overloaded. They never take a place of httpMaxCommandsInFlight until verified.
   */
  readonly httpMaxUnverifiedCommands: number;
  /** How long the body of a delivery whose credential needs it may take to arrive; past it: 408. */
  readonly httpUnverifiedBodyTimeoutMs: number;
  /** Completed records kept in memory to answer copies without the database; 0 turns the cache off. */
  readonly inboxCacheSize: number;
  /** How long after its completion a record may be answered from memory; below the inbox retention. */
  readonly inboxCacheTtlMs: number;
  /** How often the background job prunes expired inbox rows and dead letters; 0 disables it. */
  readonly inboxPruneIntervalMs: number;
  /** Rows deleted per short transaction when pruning. */
  readonly inboxPruneBatchSize: number;
  /** How long a SIGTERM/SIGINT waits for in-flight requests before the process gives up and exits 1. */
  readonly shutdownGraceMs: number;
  /** Longest time a request's headers and body may take to arrive; past it: 408, connection closed. */
  readonly httpRequestTimeoutMs: number;
  /** Longest time a request's headers may take to arrive (at most httpRequestTimeoutMs). */
  readonly httpHeadersTimeoutMs: number;
  readonly emailProvider: EmailProviderKind;
  readonly emailProviderUrl: string | undefined;
  readonly emailProviderIdempotent: boolean;
  readonly emailProviderTimeoutMs: number;
  readonly emailLogFile: string;
  readonly logLevel: string;
  /** RabbitMQ (AMQP 0-9-1); unset: no broker, commands over HTTP only, outbox events wait in the table. */
  readonly amqpUrl: string | undefined;
  /** Durable topic exchange the outbox relay publishes events to (routing key = event type). */
  readonly amqpExchange: string;
  /** Exchange that command queues dead-letter poison messages to. */
  readonly amqpDeadLetterExchange: string;
  /** Durable queue bound to the dead-letter exchange, so dead-lettered messages are kept. */
  readonly amqpDeadLetterQueue: string;
  readonly amqpOrderPlacedQueue: string;
  readonly amqpOrderCancelledQueue: string;
  /** Unacknowledged deliveries per consumer channel. */
  readonly amqpPrefetch: number;
  /** First wait before a delivery that failed for a transient reason (database down) is requeued; doubles up to the max. */
  readonly amqpRetryDelayMs: number;
  readonly amqpRetryMaxDelayMs: number;
  /** Deliveries of one command that failed unexpectedly (not an outage, not busy) before it is dead-lettered. */
  readonly amqpMaxDeliveries: number;
  /**
   * classic, or quorum: the command and dead-letter queues replicated across a RabbitMQ cluster, and on the
   * command queues the broker's delivery cap (x-delivery-limit = amqpMaxDeliveries) for a message whose
   * consumer keeps dying with it unsettled.
   */
  readonly amqpQueueType: 'classic' | 'quorum';
  /** How often the relay looks for pending outbox events when nothing woke it. */
  readonly outboxRelayIntervalMs: number;
  /** Events per relay transaction. */
  readonly outboxRelayBatchSize: number;
  /** Longest wait between relay attempts (and broker reconnects) while publishing fails. */
  readonly outboxRelayMaxBackoffMs: number;
  /** How long a batch waits for the broker's publisher confirms before it counts as failed. */
  readonly outboxPublishTimeoutMs: number;
  /** Published outbox rows older than this are pruned by the retention job. */
  readonly outboxRetentionDays: number;
}

export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

export const DEFAULT_DATABASE_URL = 'pglite:./data/bookstore';

type Env = Record<string, string | undefined>;

function text(env: Env, name: string): string | undefined {
  const value = env[name]?.trim();
  return value === undefined || value === '' ? undefined : value;
}

function integer(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = text(env, name);
  if (raw === undefined) return fallback;
  if (!/^\d+$/.test(raw)) throw new ConfigError(`${name} must be a whole number, got "${raw}"`);
  const value = Number(raw);
  if (value < min || value > max) throw new ConfigError(`${name} must be between ${min} and ${max}, got ${value}`);
  return value;
}

function oneOf<T extends string>(env: Env, name: string, fallback: T, allowed: readonly T[]): T {
  const raw = text(env, name);
  if (raw === undefined) return fallback;
  if (!(allowed as readonly string[]).includes(raw)) {
    throw new ConfigError(`${name} must be one of ${allowed.join(', ')}, got "${raw}"`);
  }
  return raw as T;
}

function boolean(env: Env, name: string, fallback: boolean): boolean {
  const raw = text(env, name);
  if (raw === undefined) return fallback;
  if (raw === 'true' || raw === '1') return true;
  if (raw === 'false' || raw === '0') return false;
  throw new ConfigError(`${name} must be true or false, got "${raw}"`);
}

function databaseUrl(env: Env): string {
  const raw = text(env, 'DATABASE_URL') ?? DEFAULT_DATABASE_URL;
  if (!/^(pglite:|postgres(ql)?:\/\/|mssql:\/\/|sqlserver:\/\/|mysql:\/\/|mariadb:\/\/)/.test(raw)) {
    throw new ConfigError(
      'DATABASE_URL must start with pglite:, postgres://, postgresql://, mssql://, sqlserver://, mysql:// or mariadb:// ' +
        `(got "${raw.replace(/\/\/[^@/]*@/, '//***@')}")`,
    );
  }
  return raw;
}

const AMQP_NAME = /^(?!amq\.)[A-Za-z0-9._:-]{1,255}$/;

function amqpName(env: Env, name: string, fallback: string): string {
  const value = text(env, name) ?? fallback;
  if (!AMQP_NAME.test(value)) {
    throw new ConfigError(`${name} must be 1-255 letters, digits, ".", "_", ":" or "-" and not start with "amq." (got "${value}")`);
  }
  return value;
}

function amqpUrl(env: Env): string | undefined {
  const raw = text(env, 'AMQP_URL');
  if (raw === undefined) return undefined;
  if (!URL.canParse(raw) || !/^amqps?:$/.test(new URL(raw).protocol)) {
    throw new ConfigError(`AMQP_URL must be an amqp:// or amqps:// URL (got "${raw.replace(/\/\/[^@/]*@/, '//***@')}")`);
  }
  return raw;
}

function producersOf(env: Env, adminToken: string | undefined, webhookSecret: string | undefined): readonly ProducerConfig[] {
  try {
    const settings = {
      apiKeys: text(env, 'PRODUCER_API_KEYS'),
      webhookSecrets: text(env, 'PRODUCER_WEBHOOK_SECRETS'),
      file: text(env, 'PRODUCERS_FILE'),
    };
    return Object.freeze(loadProducers(settings, adminToken, webhookSecret));
  } catch (error) {
    if (error instanceof ProducerConfigError) throw new ConfigError(error.message);
    throw error;
  }
}

/** EMAIL_PROVIDER, and the URL an http provider needs. */
function emailProviderSettings(env: Env): Pick<Config, 'emailProvider' | 'emailProviderUrl'> {
  const emailProvider = oneOf(env, 'EMAIL_PROVIDER', 'log', ['log', 'http'] as const);
  const emailProviderUrl = text(env, 'EMAIL_PROVIDER_URL');
  if (emailProvider === 'http') {
    if (emailProviderUrl === undefined) throw new ConfigError('EMAIL_PROVIDER=http needs EMAIL_PROVIDER_URL');
    if (!URL.canParse(emailProviderUrl) || !/^https?:$/.test(new URL(emailProviderUrl).protocol)) {
      throw new ConfigError(`EMAIL_PROVIDER_URL must be an http(s) URL, got "${emailProviderUrl}"`);
    }
  }
  return { emailProvider, emailProviderUrl };
}

/**
 * Who may call the service: the admin token, the producers' credentials and the address it listens
 * on. A non-loopback address with no credentials at all is refused unless anonymous commands are
 * allowed deliberately.
 */
function accessSettings(env: Env): Pick<Config, 'webhookSecret' | 'adminToken' | 'producers' | 'host' | 'allowAnonymousCommands'> {
  const webhookSecret = text(env, 'WEBHOOK_SECRET');
  if (webhookSecret !== undefined && !isWebhookSecret(webhookSecret)) {
    throw new ConfigError('WEBHOOK_SECRET must be a Standard Webhooks secret: "whsec_" followed by base64');
  }
  const adminToken = text(env, 'ADMIN_TOKEN');
  if (adminToken !== undefined && adminToken.length < 16) {
    throw new ConfigError('ADMIN_TOKEN must be at least 16 characters long');
  }
  const producers = producersOf(env, adminToken, webhookSecret);
  const host = text(env, 'HOST') ?? '127.0.0.1';
  const allowAnonymousCommands = boolean(env, 'ALLOW_ANONYMOUS_COMMANDS', false);
  if (producers.length === 0 && webhookSecret === undefined && !isLoopbackHost(host) && !allowAnonymousCommands) {
    throw new ConfigError(
      `HOST=${host} is reachable from other machines and no producer credentials are set (PRODUCER_API_KEYS, ` +
        'PRODUCER_WEBHOOK_SECRETS, PRODUCERS_FILE or WEBHOOK_SECRET): set one, or ALLOW_ANONYMOUS_COMMANDS=true to accept ' +
        'unauthenticated commands deliberately',
    );
  }
  return { webhookSecret, adminToken, producers, host, allowAnonymousCommands };
}

function amqpProducerId(env: Env): string | undefined {
  const amqpProducer = text(env, 'AMQP_PRODUCER');
  if (amqpProducer !== undefined && !isValidProducerId(amqpProducer)) {
    throw new ConfigError(`AMQP_PRODUCER must match ${PRODUCER_ID_PATTERN}, got "${amqpProducer}"`);
  }
  return amqpProducer;
}

/** The inbox retention, and the duplicate cache's TTL, which must be shorter. */
function inboxRetentionSettings(env: Env): Pick<Config, 'inboxRetentionDays' | 'inboxCacheTtlMs'> {
  const inboxRetentionDays = integer(env, 'INBOX_RETENTION_DAYS', 14, 1, 3650);
  const inboxCacheTtlMs = integer(env, 'INBOX_CACHE_TTL_MS', 600_000, 0, 86_400_000);
  if (inboxCacheTtlMs >= inboxRetentionDays * 86_400_000) {
    // A cached answer must never outlive the record it stands for.
    throw new ConfigError('INBOX_CACHE_TTL_MS must be shorter than INBOX_RETENTION_DAYS');
  }
  return { inboxRetentionDays, inboxCacheTtlMs };
}

/** ADMIN_ALLOWED_HOSTS: host names, each with an optional port, comma or space separated. */
function adminAllowedHosts(env: Env): readonly string[] {
  const raw = text(env, 'ADMIN_ALLOWED_HOSTS');
  if (raw === undefined) return Object.freeze([]);
  const hosts = raw.split(/[\s,]+/).filter((h) => h !== '');
  for (const host of hosts) {
    if (!/^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]{2,45}\])(?::\d{1,5})?$/.test(host)) {
      throw new ConfigError(`ADMIN_ALLOWED_HOSTS must be host names or [IPv6] addresses, each with an optional :port, got "${host}"`);
    }
  }
  return Object.freeze(hosts.map((h) => h.toLowerCase()));
}

/** The request timeout, the headers timeout within it, and the body timeout of deliveries not yet verified. */
function httpTimeoutSettings(env: Env): Pick<Config, 'httpRequestTimeoutMs' | 'httpHeadersTimeoutMs' | 'httpUnverifiedBodyTimeoutMs'> {
  const httpRequestTimeoutMs = integer(env, 'HTTP_REQUEST_TIMEOUT_MS', 30_000, 1, 600_000);
  const httpHeadersTimeoutMs = integer(env, 'HTTP_HEADERS_TIMEOUT_MS', Math.min(10_000, httpRequestTimeoutMs), 1, 600_000);
  if (httpHeadersTimeoutMs > httpRequestTimeoutMs) {
    throw new ConfigError(
      `HTTP_HEADERS_TIMEOUT_MS (${httpHeadersTimeoutMs}) must not be above HTTP_REQUEST_TIMEOUT_MS (${httpRequestTimeoutMs})`,
    );
  }
  const httpUnverifiedBodyTimeoutMs = integer(env, 'HTTP_UNVERIFIED_BODY_TIMEOUT_MS', Math.min(2000, httpRequestTimeoutMs), 1, 600_000);
  if (httpUnverifiedBodyTimeoutMs > httpRequestTimeoutMs) {
    throw new ConfigError(
      `HTTP_UNVERIFIED_BODY_TIMEOUT_MS (${httpUnverifiedBodyTimeoutMs}) must not be above HTTP_REQUEST_TIMEOUT_MS (${httpRequestTimeoutMs})`,
    );
  }
  return { httpRequestTimeoutMs, httpHeadersTimeoutMs, httpUnverifiedBodyTimeoutMs };
}

/** The first and the longest wait before a failed delivery is requeued. */
function amqpRetrySettings(env: Env): Pick<Config, 'amqpRetryDelayMs' | 'amqpRetryMaxDelayMs'> {
  const amqpRetryDelayMs = integer(env, 'AMQP_RETRY_DELAY_MS', AMQP_CONSUMER_DEFAULTS.retryDelayMs, 1, 600_000);
  const amqpRetryMaxDelayMs = integer(env, 'AMQP_RETRY_MAX_DELAY_MS', AMQP_CONSUMER_DEFAULTS.retryMaxDelayMs, 1, 3_600_000);
  if (amqpRetryMaxDelayMs < amqpRetryDelayMs) {
    throw new ConfigError(`AMQP_RETRY_MAX_DELAY_MS (${amqpRetryMaxDelayMs}) must not be below AMQP_RETRY_DELAY_MS (${amqpRetryDelayMs})`);
  }
  return { amqpRetryDelayMs, amqpRetryMaxDelayMs };
}

/** The broker's queues and exchanges: a queue per queued command kind and the dead-letter queue, all different; two different exchanges. */
function amqpTopologySettings(
  env: Env,
): Pick<Config, 'amqpOrderPlacedQueue' | 'amqpOrderCancelledQueue' | 'amqpDeadLetterQueue' | 'amqpExchange' | 'amqpDeadLetterExchange'> {
  const commandQueues = Object.fromEntries(QUEUED_KINDS.map(({ queue }) => [queue.setting, amqpName(env, queue.env, queue.fallback)]));
  const queues = {
    ...(commandQueues as Record<(typeof QUEUED_KINDS)[number]['queue']['setting'], string>),
    amqpDeadLetterQueue: amqpName(env, 'AMQP_DEAD_LETTER_QUEUE', 'inventory.dead-letter'),
  };
  if (new Set(Object.values(queues)).size !== QUEUED_KINDS.length + 1) {
    const names = [...QUEUED_KINDS.map(({ queue }) => queue.env), 'AMQP_DEAD_LETTER_QUEUE'];
    throw new ConfigError(`${names.join(', ')} must be ${names.length} different queues`);
  }
  const amqpExchange = amqpName(env, 'AMQP_EXCHANGE', 'inventory.events');
  const amqpDeadLetterExchange = amqpName(env, 'AMQP_DEAD_LETTER_EXCHANGE', 'inventory.dead-letter');
  if (amqpExchange === amqpDeadLetterExchange) {
    throw new ConfigError('AMQP_EXCHANGE and AMQP_DEAD_LETTER_EXCHANGE must be different exchanges');
  }
  return { ...queues, amqpExchange, amqpDeadLetterExchange };
}

/** The settings read on their own: HTTP, database, inbox, email and logging. */
function serviceSettings(env: Env) {
  return {
    port: integer(env, 'PORT', 3000, 0, 65535),
    databaseUrl: databaseUrl(env),
    databaseCreate: boolean(env, 'DATABASE_CREATE', false),
    rateLimitMax: integer(env, 'RATE_LIMIT_MAX', 1000, 0, 1_000_000),
    rateLimitWindowMs: integer(env, 'RATE_LIMIT_WINDOW_MS', 1000, 100, 3_600_000),
    inboxLockTimeoutMs: integer(env, 'INBOX_LOCK_TIMEOUT_MS', 5000, 1, 600_000),
    inboxLeaseMs: integer(env, 'INBOX_LEASE_MS', 30_000, 1, 86_400_000),
    deadLetterRetentionDays: integer(env, 'DEAD_LETTER_RETENTION_DAYS', 90, 1, 3650),
    inboxBatchMax: integer(env, 'INBOX_BATCH_MAX', GROUP_COMMIT_DEFAULTS.maxBatch, 1, 200),
    inboxBatchConcurrency: integer(env, 'INBOX_BATCH_CONCURRENCY', GROUP_COMMIT_DEFAULTS.concurrency, 1, 64),
    inboxBatchBalanceWaitMs: integer(env, 'INBOX_BATCH_BALANCE_WAIT_MS', GROUP_COMMIT_DEFAULTS.balanceWaitMs, 0, 10_000),
    inboxQueueLimit: integer(env, 'INBOX_QUEUE_LIMIT', GROUP_COMMIT_DEFAULTS.queueLimit, 1, 100_000),
    httpMaxCommandsInFlight: integer(env, 'HTTP_MAX_COMMANDS_IN_FLIGHT', 256, 1, 100_000),
    httpAdmissionWaitMs: integer(env, 'HTTP_ADMISSION_WAIT_MS', 500, 0, 60_000),
    httpMaxCommandsWaiting: integer(env, 'HTTP_MAX_COMMANDS_WAITING', 4096, 0, 100_000),
    httpMaxUnverifiedCommands: integer(env, 'HTTP_MAX_UNVERIFIED_COMMANDS', 64, 1, 100_000),
    inboxCacheSize: integer(env, 'INBOX_CACHE_SIZE', 10_000, 0, 10_000_000),
    inboxPruneIntervalMs: integer(env, 'INBOX_PRUNE_INTERVAL_MS', 3_600_000, 0, 604_800_000),
    inboxPruneBatchSize: integer(env, 'INBOX_PRUNE_BATCH_SIZE', 1000, 1, 10_000),
    shutdownGraceMs: integer(env, 'SHUTDOWN_GRACE_MS', 10_000, 1, 600_000),
    emailProviderIdempotent: boolean(env, 'EMAIL_PROVIDER_IDEMPOTENT', false),
    emailProviderTimeoutMs: integer(env, 'EMAIL_PROVIDER_TIMEOUT_MS', 5000, 1, 120_000),
    emailLogFile: text(env, 'EMAIL_LOG_FILE') ?? './data/emails.jsonl',
    logLevel: oneOf(env, 'LOG_LEVEL', 'info', ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const),
  };
}

/** The settings of the broker connection, the command consumers and the outbox relay read on their own. */
function messagingSettings(env: Env) {
  return {
    amqpUrl: amqpUrl(env),
    amqpPrefetch: integer(env, 'AMQP_PREFETCH', AMQP_CONSUMER_DEFAULTS.prefetch, 1, 1000),
    amqpMaxDeliveries: integer(env, 'AMQP_MAX_DELIVERIES', AMQP_CONSUMER_DEFAULTS.maxDeliveries, 1, 1000),
    amqpQueueType: oneOf(env, 'AMQP_QUEUE_TYPE', AMQP_CONSUMER_DEFAULTS.queueType, ['classic', 'quorum'] as const),
    outboxRelayIntervalMs: integer(env, 'OUTBOX_RELAY_INTERVAL_MS', 1000, 10, 600_000),
    outboxRelayBatchSize: integer(env, 'OUTBOX_RELAY_BATCH_SIZE', 100, 1, 1000),
    outboxRelayMaxBackoffMs: integer(env, 'OUTBOX_RELAY_MAX_BACKOFF_MS', 30_000, 100, 3_600_000),
    outboxPublishTimeoutMs: integer(env, 'OUTBOX_PUBLISH_TIMEOUT_MS', 5000, 100, 600_000),
    outboxRetentionDays: integer(env, 'OUTBOX_RETENTION_DAYS', 7, 1, 3650),
  };
}

/** Reads and validates the configuration; throws ConfigError naming the first bad variable. */
export function loadConfig(env: Env = process.env): Config {
  // The settings checked against one another are read first, then the ones that stand alone, each in
  // the order written here: that order decides which of several bad variables a ConfigError names.
  const checked = {
    ...emailProviderSettings(env),
    ...accessSettings(env),
    adminAllowedHosts: adminAllowedHosts(env),
    amqpProducer: amqpProducerId(env),
    ...inboxRetentionSettings(env),
    ...httpTimeoutSettings(env),
    ...amqpRetrySettings(env),
    ...amqpTopologySettings(env),
  };
  return Object.freeze({ ...serviceSettings(env), ...messagingSettings(env), ...checked });
}
