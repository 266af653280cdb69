import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { describe, test } from 'node:test';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, loadConfig } from '../src/config.js';
import { apiKeyDigest } from '../src/producer-config.js';

const serverEntry = fileURLToPath(new URL('../src/server.ts', import.meta.url));

/** Asserts loadConfig refuses env with a ConfigError that names `variable`; returns the message. */
function refuses(env: Record<string, string>, variable: string): string {
  let caught: unknown;
  try {
    loadConfig(env);
  } catch (error) {
    caught = error;
  }
  assert.ok(caught instanceof ConfigError, `expected a ConfigError for ${JSON.stringify(env)}, got ${String(caught)}`);
  assert.equal(caught.name, 'ConfigError');
  assert.ok(caught.message.includes(variable), `"${caught.message}" does not name ${variable}`);
  return caught.message;
}

function pick(object: object, keys: readonly string[]): Record<string, unknown> {
  return Object.fromEntries(keys.map((k) => [k, (object as Record<string, unknown>)[k]]));
}

describe('loadConfig', () => {
  test('an empty environment gives the documented defaults', () => {
    const config = loadConfig({});
    // Only the variables documented in DESIGN.md; settings added later get their own tests.
    const documented = {
      port: 3000,
      host: '127.0.0.1',
      databaseUrl: 'pglite:./data/bookstore',
      adminToken: undefined,
      webhookSecret: undefined,
      inboxLockTimeoutMs: 5000,
      inboxLeaseMs: 30_000,
      inboxRetentionDays: 14,
      deadLetterRetentionDays: 90,
      emailProvider: 'log',
      emailProviderUrl: undefined,
      emailProviderIdempotent: false,
      logLevel: 'info',
    };
    assert.deepEqual(pick(config, Object.keys(documented)), documented);
  });

  test('AMQP_QUEUE_TYPE: classic by default, or quorum; anything else is refused', () => {
    assert.equal(loadConfig({}).amqpQueueType, 'classic');
    assert.equal(loadConfig({ AMQP_QUEUE_TYPE: 'quorum' }).amqpQueueType, 'quorum');
    assert.throws(() => loadConfig({ AMQP_QUEUE_TYPE: 'stream' }), /AMQP_QUEUE_TYPE/);
  });

  test('DATABASE_CREATE: off by default (a least-privileged login never touches master); true or false', () => {
    assert.equal(loadConfig({}).databaseCreate, false);
    assert.equal(loadConfig({ DATABASE_CREATE: 'true' }).databaseCreate, true);
    assert.equal(loadConfig({ DATABASE_CREATE: '0' }).databaseCreate, false);
    assert.throws(() => loadConfig({ DATABASE_CREATE: 'yes please' }), /DATABASE_CREATE/);
  });

  test('HTTP timeouts: 30 s for a whole request and 10 s for its headers by default; a short request timeout bounds the headers too', () => {
    assert.deepEqual(pick(loadConfig({}), ['httpRequestTimeoutMs', 'httpHeadersTimeoutMs']), {
      httpRequestTimeoutMs: 30_000,
      httpHeadersTimeoutMs: 10_000,
    });
    assert.equal(loadConfig({ HTTP_REQUEST_TIMEOUT_MS: '5000' }).httpHeadersTimeoutMs, 5000);
    assert.equal(loadConfig({ HTTP_REQUEST_TIMEOUT_MS: '60000', HTTP_HEADERS_TIMEOUT_MS: '20000' }).httpHeadersTimeoutMs, 20_000);
  });

  test('blank values count as unset, so a templated empty variable falls back to the default', () => {
    const config = loadConfig({ PORT: '', HOST: '  ', ADMIN_TOKEN: '', EMAIL_PROVIDER: ' ' });
    assert.equal(config.port, 3000);
    assert.equal(config.host, '127.0.0.1');
    assert.equal(config.adminToken, undefined);
    assert.equal(config.emailProvider, 'log');
  });

  test('the result is frozen', () => {
    const config = loadConfig({});
    assert.ok(Object.isFrozen(config));
    assert.throws(() => {
      (config as { port: number }).port = 1;
    }, TypeError);
    assert.equal(config.port, 3000);
  });

  test('valid values are read and typed', () => {
    const config = loadConfig({
      PORT: '8080',
      HOST: '0.0.0.0',
      DATABASE_URL: 'postgres://app@db:5432/bookstore',
      ADMIN_TOKEN: 'a-long-enough-admin-token',
      WEBHOOK_SECRET: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
      INBOX_LOCK_TIMEOUT_MS: '250',
      INBOX_LEASE_MS: '60000',
      INBOX_RETENTION_DAYS: '7',
      DEAD_LETTER_RETENTION_DAYS: '30',
      EMAIL_PROVIDER: 'http',
      EMAIL_PROVIDER_URL: 'https://mail.example/send',
      EMAIL_PROVIDER_IDEMPOTENT: 'true',
      LOG_LEVEL: 'warn',
    });
    assert.equal(config.port, 8080);
    assert.equal(config.host, '0.0.0.0');
    assert.equal(config.databaseUrl, 'postgres://app@db:5432/bookstore');
    assert.equal(config.adminToken, 'a-long-enough-admin-token');
    assert.equal(config.webhookSecret, 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw');
    assert.equal(config.inboxLockTimeoutMs, 250);
    assert.equal(config.inboxLeaseMs, 60_000);
    assert.equal(config.inboxRetentionDays, 7);
    assert.equal(config.deadLetterRetentionDays, 30);
    assert.equal(config.emailProvider, 'http');
    assert.equal(config.emailProviderUrl, 'https://mail.example/send');
    assert.equal(config.emailProviderIdempotent, true);
    assert.equal(config.logLevel, 'warn');
  });

  test('every documented database URL scheme is accepted', () => {
    for (const url of [
      'pglite:memory',
      'pglite:./data/x',
      'postgres://h/db',
      'postgresql://h/db',
      'mssql://h/db',
      'sqlserver://h/db',
      'mysql://h/db',
      'mariadb://h/db',
    ]) {
      assert.equal(loadConfig({ DATABASE_URL: url }).databaseUrl, url);
    }
  });

  const bad: [Record<string, string>, string][] = [
    [{ PORT: 'abc' }, 'PORT'],
    [{ PORT: '70000' }, 'PORT'],
    [{ PORT: '-1' }, 'PORT'],
    [{ PORT: '80.5' }, 'PORT'],
    [{ DATABASE_URL: 'oracle://x' }, 'DATABASE_URL'],
    [{ EMAIL_PROVIDER: 'smtp' }, 'EMAIL_PROVIDER'],
    [{ EMAIL_PROVIDER: 'http' }, 'EMAIL_PROVIDER_URL'],
    [{ EMAIL_PROVIDER: 'http', EMAIL_PROVIDER_URL: 'ftp://mail.example' }, 'EMAIL_PROVIDER_URL'],
    [{ WEBHOOK_SECRET: 'nope' }, 'WEBHOOK_SECRET'],
    [{ ADMIN_TOKEN: 'short' }, 'ADMIN_TOKEN'],
    [{ EMAIL_PROVIDER_IDEMPOTENT: 'maybe' }, 'EMAIL_PROVIDER_IDEMPOTENT'],
    [{ INBOX_LOCK_TIMEOUT_MS: '0' }, 'INBOX_LOCK_TIMEOUT_MS'],
    [{ INBOX_LEASE_MS: 'soon' }, 'INBOX_LEASE_MS'],
    [{ INBOX_RETENTION_DAYS: '0' }, 'INBOX_RETENTION_DAYS'],
    [{ DEAD_LETTER_RETENTION_DAYS: '1e3' }, 'DEAD_LETTER_RETENTION_DAYS'],
    [{ LOG_LEVEL: 'verbose' }, 'LOG_LEVEL'],
    [{ INBOX_BATCH_MAX: '0' }, 'INBOX_BATCH_MAX'],
    [{ INBOX_BATCH_CONCURRENCY: 'many' }, 'INBOX_BATCH_CONCURRENCY'],
    [{ INBOX_BATCH_BALANCE_WAIT_MS: '-1' }, 'INBOX_BATCH_BALANCE_WAIT_MS'],
    [{ INBOX_BATCH_BALANCE_WAIT_MS: '10001' }, 'INBOX_BATCH_BALANCE_WAIT_MS'],
    [{ INBOX_QUEUE_LIMIT: '0' }, 'INBOX_QUEUE_LIMIT'],
    [{ INBOX_CACHE_SIZE: '-5' }, 'INBOX_CACHE_SIZE'],
    // A cached answer must not outlive its record: the TTL must be shorter than the retention.
    [{ INBOX_RETENTION_DAYS: '1', INBOX_CACHE_TTL_MS: '86400000' }, 'INBOX_CACHE_TTL_MS'],
    // 0 would turn the bound off: a slow client would hold its connection for ever.
    [{ HTTP_REQUEST_TIMEOUT_MS: '0' }, 'HTTP_REQUEST_TIMEOUT_MS'],
    [{ HTTP_HEADERS_TIMEOUT_MS: '0' }, 'HTTP_HEADERS_TIMEOUT_MS'],
    [{ HTTP_REQUEST_TIMEOUT_MS: '5000', HTTP_HEADERS_TIMEOUT_MS: '6000' }, 'HTTP_HEADERS_TIMEOUT_MS'],
  ];
  for (const [env, variable] of bad) {
    test(`${Object.entries(env)
      .map(([k, v]) => `${k}=${v}`)
      .join(' ')} throws a ConfigError naming ${variable}`, () => {
      refuses(env, variable);
    });
  }

  test('group commit, queue and cache settings: documented defaults, and values read as given', () => {
    const settings = [
      'inboxBatchMax',
      'inboxBatchConcurrency',
      'inboxBatchBalanceWaitMs',
      'inboxQueueLimit',
      'inboxCacheSize',
      'inboxCacheTtlMs',
    ] as const;
    assert.deepEqual(pick(loadConfig({}), settings), {
      inboxBatchMax: 64,
      inboxBatchConcurrency: 2,
      inboxBatchBalanceWaitMs: 10,
      inboxQueueLimit: 512,
      inboxCacheSize: 10_000,
      inboxCacheTtlMs: 600_000,
    });
    const set = loadConfig({
      INBOX_BATCH_MAX: '1',
      INBOX_BATCH_CONCURRENCY: '4',
      INBOX_BATCH_BALANCE_WAIT_MS: '0',
      INBOX_QUEUE_LIMIT: '50',
      INBOX_CACHE_SIZE: '0',
      INBOX_CACHE_TTL_MS: '1000',
    });
    assert.deepEqual(pick(set, settings), {
      inboxBatchMax: 1,
      inboxBatchConcurrency: 4,
      inboxBatchBalanceWaitMs: 0,
      inboxQueueLimit: 50,
      inboxCacheSize: 0,
      inboxCacheTtlMs: 1000,
    });
  });

  test('the message shows the bad value, so the operator sees what was read', () => {
    assert.match(refuses({ PORT: 'abc' }, 'PORT'), /abc/);
    assert.match(refuses({ EMAIL_PROVIDER: 'smtp' }, 'EMAIL_PROVIDER'), /smtp/);
  });

  test('a refused DATABASE_URL does not echo its password', () => {
    const message = refuses({ DATABASE_URL: 'oracle://app:hunter2@db/bookstore' }, 'DATABASE_URL');
    assert.doesNotMatch(message, /hunter2/);
  });
});

describe('the server entry with a bad configuration', () => {
  test('PORT=abc: exit code 2 and one clear line on stderr, no stack trace', async () => {
    // A minimal environment, so a variable set in the test runner's shell cannot change the outcome.
    const child = spawn(process.execPath, ['--import', 'tsx', serverEntry], {
      env: { PATH: process.env.PATH ?? '', PORT: 'abc' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const [code] = (await once(child, 'exit')) as [number | null];

    assert.equal(code, 2, `stderr: ${stderr}`);
    assert.match(stderr, /^configuration error: PORT .*"abc"/m);
    assert.doesNotMatch(stderr, /\n\s+at /, 'no stack trace');
    assert.equal(stderr.trim().split('\n').length, 1, 'one line');
    assert.equal(stdout, '');
  });
});

describe('the server entry bound beyond loopback without producer credentials', () => {
  test('HOST=0.0.0.0 and no credentials: exit code 2, one line naming ALLOW_ANONYMOUS_COMMANDS, nothing listens', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', serverEntry], {
      env: { PATH: process.env.PATH ?? '', HOST: '0.0.0.0', PORT: '0', DATABASE_URL: 'pglite:memory' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const [code] = (await once(child, 'exit')) as [number | null];

    assert.equal(code, 2, `stderr: ${stderr}`);
    assert.match(stderr, /^configuration error: HOST=0\.0\.0\.0 .*ALLOW_ANONYMOUS_COMMANDS=true/m);
    assert.equal(stderr.trim().split('\n').length, 1, 'one line');
    assert.equal(stdout, '', 'it never listened');
  });
});

describe('loadConfig: producers', () => {
  const key = 'k'.repeat(43);
  const digest = `sha256:${apiKeyDigest(key)}`;
  const secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';

  test('anonymous commands: loopback addresses are fine; any other address needs credentials or ALLOW_ANONYMOUS_COMMANDS', () => {
    for (const host of ['127.0.0.1', '127.1.2.3', '::1', '[::1]', 'localhost'])
      assert.equal(loadConfig({ HOST: host }).producers.length, 0);
    for (const host of ['0.0.0.0', '::', '192.0.2.10']) refuses({ HOST: host }, 'ALLOW_ANONYMOUS_COMMANDS');
    assert.equal(loadConfig({ HOST: '0.0.0.0', ALLOW_ANONYMOUS_COMMANDS: 'true' }).allowAnonymousCommands, true);
    assert.equal(loadConfig({ HOST: '0.0.0.0', WEBHOOK_SECRET: secret }).host, '0.0.0.0');
    assert.equal(loadConfig({ HOST: '0.0.0.0', PRODUCER_API_KEYS: `orders:${digest}` }).producers.length, 1);
  });

  test('several producers from the environment and a file, two credentials each, kept as digests', () => {
    const next = `sha256:${apiKeyDigest('n'.repeat(43))}`;
    const dir = mkdtempSync(join(tmpdir(), 'producers-'));
    const file = join(dir, 'producers.json');
    const other = 'whsec_QmlsbGluZ1NlY3JldEZvclRlc3RzMTIz';
    writeFileSync(file, JSON.stringify({ producers: { billing: { webhookSecrets: [other], rateLimitMax: 5 } } }));
    const config = loadConfig({
      PRODUCER_API_KEYS: `orders:${digest}, orders:${next}`,
      PRODUCER_WEBHOOK_SECRETS: `shipping:${secret}`,
      PRODUCERS_FILE: file,
    });
    assert.deepEqual(
      config.producers.map((p) => ({ ...p })),
      [
        { id: 'orders', apiKeySha256: [digest.slice(7), next.slice(7)], webhookSecrets: [], rateLimitMax: undefined },
        { id: 'shipping', apiKeySha256: [], webhookSecrets: [secret], rateLimitMax: undefined },
        { id: 'billing', apiKeySha256: [], webhookSecrets: [other], rateLimitMax: 5 },
      ],
    );
    assert.ok(!JSON.stringify(config).includes(key), 'no API key in the clear');
  });

  test('refused: a plain API key, a bad id, a shared credential, ADMIN_TOKEN as a producer key, a bad file', () => {
    refuses({ PRODUCER_API_KEYS: `orders:${key}` }, 'PRODUCER_API_KEYS');
    refuses({ PRODUCER_API_KEYS: `Orders:${digest}` }, 'PRODUCER_API_KEYS');
    refuses({ PRODUCER_API_KEYS: digest }, 'PRODUCER_API_KEYS');
    refuses({ PRODUCER_API_KEYS: `a:${digest},b:${digest}` }, 'share an API key');
    refuses({ PRODUCER_WEBHOOK_SECRETS: 'shipping:not-a-secret' }, 'PRODUCER_WEBHOOK_SECRETS');
    refuses({ PRODUCER_WEBHOOK_SECRETS: `shipping:${secret}`, WEBHOOK_SECRET: secret }, 'WEBHOOK_SECRET');
    refuses({ ADMIN_TOKEN: key, PRODUCER_API_KEYS: `orders:${digest}` }, 'ADMIN_TOKEN');
    refuses({ PRODUCERS_FILE: '/nonexistent/producers.json' }, 'PRODUCERS_FILE');
    const dir = mkdtempSync(join(tmpdir(), 'producers-'));
    const file = join(dir, 'producers.json');
    writeFileSync(file, JSON.stringify({ producers: { orders: { apiKeys: [key] } } }));
    refuses({ PRODUCERS_FILE: file }, 'PRODUCERS_FILE');
    writeFileSync(file, JSON.stringify({ producers: { orders: { apiKey: digest } } }));
    refuses({ PRODUCERS_FILE: file }, 'unknown field');
    refuses({ AMQP_PRODUCER: 'Not Valid' }, 'AMQP_PRODUCER');
  });

  test('rate limits: 1000 commands per producer per second by default; configurable; 0 turns them off', () => {
    assert.deepEqual(pick(loadConfig({}), ['rateLimitMax', 'rateLimitWindowMs']), { rateLimitMax: 1000, rateLimitWindowMs: 1000 });
    assert.deepEqual(pick(loadConfig({ RATE_LIMIT_MAX: '0', RATE_LIMIT_WINDOW_MS: '60000' }), ['rateLimitMax', 'rateLimitWindowMs']), {
      rateLimitMax: 0,
      rateLimitWindowMs: 60_000,
    });
    refuses({ RATE_LIMIT_MAX: 'many' }, 'RATE_LIMIT_MAX');
  });
});

describe('loadConfig: RabbitMQ and the outbox relay', () => {
  test('defaults: no broker, the documented names and timings', () => {
    const config = loadConfig({});
    assert.deepEqual(
      pick(config, [
        'amqpUrl',
        'amqpExchange',
        'amqpDeadLetterExchange',
        'amqpDeadLetterQueue',
        'amqpOrderPlacedQueue',
        'amqpOrderCancelledQueue',
        'amqpPrefetch',
        'amqpRetryDelayMs',
        'amqpRetryMaxDelayMs',
        'amqpMaxDeliveries',
        'outboxRelayIntervalMs',
        'outboxRelayBatchSize',
        'outboxRelayMaxBackoffMs',
        'outboxPublishTimeoutMs',
        'outboxRetentionDays',
      ]),
      {
        amqpUrl: undefined,
        amqpExchange: 'inventory.events',
        amqpDeadLetterExchange: 'inventory.dead-letter',
        amqpDeadLetterQueue: 'inventory.dead-letter',
        amqpOrderPlacedQueue: 'inventory.order-placed',
        amqpOrderCancelledQueue: 'inventory.order-cancelled',
        amqpPrefetch: 32,
        amqpRetryDelayMs: 1000,
        amqpRetryMaxDelayMs: 30_000,
        amqpMaxDeliveries: 5,
        outboxRelayIntervalMs: 1000,
        outboxRelayBatchSize: 100,
        outboxRelayMaxBackoffMs: 30_000,
        outboxPublishTimeoutMs: 5000,
        outboxRetentionDays: 7,
      },
    );
  });

  test('valid values are read', () => {
    const config = loadConfig({
      AMQP_URL: 'amqps://app:secret@broker.local:5671/inventory',
      AMQP_EXCHANGE: 'shop.inventory-events',
      AMQP_ORDER_PLACED_QUEUE: 'q.placed',
      AMQP_PREFETCH: '5',
      AMQP_MAX_DELIVERIES: '3',
      OUTBOX_RELAY_BATCH_SIZE: '10',
      OUTBOX_RETENTION_DAYS: '1',
    });
    assert.equal(config.amqpUrl, 'amqps://app:secret@broker.local:5671/inventory');
    assert.equal(config.amqpExchange, 'shop.inventory-events');
    assert.equal(config.amqpOrderPlacedQueue, 'q.placed');
    assert.equal(config.amqpPrefetch, 5);
    assert.equal(config.amqpMaxDeliveries, 3);
    assert.equal(config.outboxRelayBatchSize, 10);
    assert.equal(config.outboxRetentionDays, 1);
  });

  test('bad values are refused, naming the variable (and never echoing the password)', () => {
    const message = refuses({ AMQP_URL: 'http://user:hunter2@broker:5672' }, 'AMQP_URL');
    assert.doesNotMatch(message, /hunter2/);
    refuses({ AMQP_EXCHANGE: 'amq.topic' }, 'AMQP_EXCHANGE');
    refuses({ AMQP_ORDER_PLACED_QUEUE: 'has space' }, 'AMQP_ORDER_PLACED_QUEUE');
    refuses({ AMQP_ORDER_CANCELLED_QUEUE: 'inventory.order-placed' }, 'AMQP_ORDER_CANCELLED_QUEUE');
    refuses({ AMQP_DEAD_LETTER_EXCHANGE: 'inventory.events' }, 'AMQP_DEAD_LETTER_EXCHANGE');
    refuses({ AMQP_PREFETCH: '0' }, 'AMQP_PREFETCH');
    refuses({ AMQP_MAX_DELIVERIES: '0' }, 'AMQP_MAX_DELIVERIES');
    refuses({ AMQP_RETRY_DELAY_MS: '5000', AMQP_RETRY_MAX_DELAY_MS: '1000' }, 'AMQP_RETRY_MAX_DELAY_MS');
    refuses({ OUTBOX_RELAY_BATCH_SIZE: '1001' }, 'OUTBOX_RELAY_BATCH_SIZE');
    refuses({ OUTBOX_RETENTION_DAYS: 'seven' }, 'OUTBOX_RETENTION_DAYS');
  });
});
