/**
 * What each environment variable means, for people. The configuration table in docs/operations.md and
 * README.md is generated from this and from loadConfig itself (`npm run docs:config`): the variables,
 * their defaults and the values they accept come from the loader, so only the meaning is written here.
 * test/docs/config-table.test.ts fails when a variable the loader reads has no entry, an entry names a
 * variable the loader does not read, or the committed tables differ from what would be generated.
 */
export const CONFIG_MEANINGS: Readonly<Record<string, string>> = {
  PORT: 'TCP port to listen on; 0 picks a free one',
  HOST:
    'address to listen on; `0.0.0.0` in containers (the Dockerfile sets it). Any address but loopback needs a producer ' +
    'credential or `ALLOW_ANONYMOUS_COMMANDS=true`, or the service refuses to start',
  DATABASE_URL:
    '`pglite:<dir>` or `pglite:memory` (embedded PostgreSQL), `postgres://…` / `postgresql://…`, `mssql://…` / `sqlserver://…` ' +
    '(the SQL Server database must exist: see `DATABASE_CREATE`), `mysql://…` / `mariadb://…` (MariaDB 10.6+ or MySQL 8; ' +
    'create the database with `npm run db:create`, in utf8mb4 with the binary collation)',
  DATABASE_CREATE:
    'SQL Server: `true` creates a missing database at start-up, with `READ_COMMITTED_SNAPSHOT` on (needs a login that may connect ' +
    'to `master` and `CREATE DATABASE`); `npm run db:create` does the same once, so the service itself can run with rights on ' +
    'its own database only',
  ADMIN_TOKEN:
    'bearer token for the admin routes (`PUT /stock/…`, `/inbox…`, `/dead-letters…`, `/outbox`, `POST /inbox/prune`); no ' +
    "producer's key. Unset: admin routes answer loopback clients only, never a request that came through a proxy " +
    "(`X-Forwarded-For`, `Forwarded`, `X-Real-IP`), only under the service's own `Host` names (`ADMIN_ALLOWED_HOSTS`); set or " +
    'not, a state-changing admin request a browser marks as cross-site is refused ([docs/security.md](docs/security.md))',
  ADMIN_ALLOWED_HOSTS:
    'host names (each with an optional `:port`) the admin routes answer to besides `localhost`, `127.0.0.1`, `[::1]` and ' +
    '`HOST`, comma separated; any other `Host` is refused with 403 `untrusted-host` (DNS rebinding). With `ADMIN_TOKEN` set, ' +
    'the `Host` is checked only when this is set ([docs/security.md](docs/security.md))',
  PRODUCER_API_KEYS:
    "producers' API keys as digests: `<producer>:sha256:<64 hex>`, comma separated, several per producer for rotation " +
    '([docs/security.md](docs/security.md); `npm run producer:key -- <producer>` makes one)',
  PRODUCER_WEBHOOK_SECRETS: "producers' Standard Webhooks secrets: `<producer>:whsec_…`, comma separated",
  PRODUCERS_FILE:
    'a JSON file of producers: `{"producers": {"<id>": {"apiKeys": ["sha256:…"], "webhookSecrets": ["whsec_…"], "rateLimitMax": n}}}`',
  ALLOW_ANONYMOUS_COMMANDS: '`true`: accept unauthenticated commands on a non-loopback `HOST` (deliberately open)',
  RATE_LIMIT_MAX:
    'commands per producer per window, across the command routes, per replica; past it 429 `rate-limited` with `Retry-After`, ' +
    'nothing recorded. `0` turns it off; anonymous commands on loopback are never limited',
  RATE_LIMIT_WINDOW_MS: 'the window of `RATE_LIMIT_MAX`',
  AMQP_PRODUCER: 'the producer whose keys the RabbitMQ command queues record under; unset: unscoped keys',
  WEBHOOK_SECRET:
    'Standard Webhooks secret (`whsec_` + base64) of the one webhook sender whose keys stay unscoped. Set alone: every command ' +
    'must carry a valid `webhook-signature`. With no credential at all: commands are anonymous (loopback only), and the ' +
    'service warns at start-up',
  INBOX_LOCK_TIMEOUT_MS:
    "how long a copy waits on another copy's uncommitted claim before answering 409 `in-flight`; on MariaDB and MySQL " +
    '(innodb_lock_wait_timeout counts whole seconds) rounded up to whole seconds, at least one',
  INBOX_LEASE_MS: 'how long an in-progress email attempt is presumed alive',
  INBOX_RETENTION_DAYS: 'completed inbox records older than this are pruned; a key is remembered at least this long after it was processed',
  DEAD_LETTER_RETENTION_DAYS: 'dead letters older than this are pruned',
  INBOX_BATCH_MAX: 'group commit: most commands one transaction commits; `1` turns batching off',
  INBOX_BATCH_CONCURRENCY:
    'group commit: transactions one consumer may have in flight at once; commands arriving meanwhile queue for the next (PGlite always 1)',
  INBOX_BATCH_BALANCE_WAIT_MS:
    'group commit: while a transaction is in flight, another starts beside it only with as many commands as it holds, or once ' +
    'the first queued command has waited this long; `0`: a free slot starts with whatever is queued',
  INBOX_QUEUE_LIMIT:
    'commands one consumer may have queued (two-phase commands: in flight); past it a command is refused with 503 `overloaded` ' +
    'and `Retry-After: 1`, nothing recorded',
  HTTP_MAX_COMMANDS_IN_FLIGHT:
    'commands one replica holds over HTTP at once (from arrival to the response sent); past it a command is refused as it ' +
    'arrives, before its body is read: it waits for a place (`HTTP_ADMISSION_WAIT_MS`), then 503 `overloaded` and ' +
    '`Retry-After: 1`, nothing recorded',
  HTTP_MAX_UNVERIFIED_COMMANDS:
    'signed deliveries (`webhook-signature`, no API key) one replica reads at once before their signature can be checked; ' +
    'past it 503 `overloaded` and `Retry-After: 1`. They take a place of `HTTP_MAX_COMMANDS_IN_FLIGHT` only once verified, so ' +
    'unauthenticated clients cannot crowd out producers with API keys',
  HTTP_UNVERIFIED_BODY_TIMEOUT_MS:
    'how long the body of a signed delivery may take to arrive (its signature needs it); past it 408 `request-timeout` and the ' +
    'connection is closed. At most `HTTP_REQUEST_TIMEOUT_MS`',
  HTTP_ADMISSION_WAIT_MS:
    'how long a command past `HTTP_MAX_COMMANDS_IN_FLIGHT` waits, unread, for a place (the newest waiter is admitted first) ' +
    'before it is refused with 503 `overloaded`; `0` refuses at once. Waiting costs no CPU, refusing does (Overload in ' +
    'docs/operations.md)',
  HTTP_MAX_COMMANDS_WAITING:
    'commands that may wait for a place at once; past it the one that has waited longest is refused (503 `overloaded`)',
  INBOX_CACHE_SIZE: 'completed records kept in memory to answer copies without the database; `0` turns the cache off',
  INBOX_CACHE_TTL_MS:
    'how long after its completion a record may be answered from memory (default 10 min); must be shorter than `INBOX_RETENTION_DAYS`',
  INBOX_PRUNE_INTERVAL_MS: 'how often the background retention job runs (default 1 h); `0` disables it',
  INBOX_PRUNE_BATCH_SIZE: 'rows per DELETE when pruning; each batch is its own short transaction',
  SHUTDOWN_GRACE_MS: 'on SIGTERM/SIGINT, how long in-flight requests may take to finish before the process exits 1 anyway',
  HTTP_REQUEST_TIMEOUT_MS:
    "longest time a request's headers and body may take to arrive; a slower client gets 408 `request-timeout` and its connection " +
    'is closed, nothing recorded',
  HTTP_HEADERS_TIMEOUT_MS:
    "longest time a request's headers may take to arrive (408 likewise); at most `HTTP_REQUEST_TIMEOUT_MS`, and that when it is " +
    'shorter than 10 s',
  EMAIL_PROVIDER:
    '`log` appends one JSON line per email to `EMAIL_LOG_FILE`; `http` POSTs to `EMAIL_PROVIDER_URL` with an `Idempotency-Key`',
  EMAIL_PROVIDER_URL: "the provider's http(s) URL; required when `EMAIL_PROVIDER=http`",
  EMAIL_PROVIDER_IDEMPOTENT:
    'the provider deduplicates by `Idempotency-Key`, so an attempt whose lease expired may be resent safely (otherwise it needs reconciliation)',
  EMAIL_PROVIDER_TIMEOUT_MS: 'how long to wait for the provider before the outcome counts as unknown: 504, record left in progress',
  EMAIL_LOG_FILE: 'where the `log` provider writes',
  LOG_LEVEL: 'pino log level',
  AMQP_URL: 'RabbitMQ. Set: consume the command queues and run the outbox relay. Unset: no connection; outbox events stay pending',
  AMQP_EXCHANGE: 'durable topic exchange events are published to (routing key = event type)',
  AMQP_ORDER_PLACED_QUEUE: 'durable queue of OrderPlaced commands',
  AMQP_ORDER_CANCELLED_QUEUE: 'durable queue of OrderCancelled commands',
  AMQP_DEAD_LETTER_EXCHANGE: 'where the command queues dead-letter poison messages (topic)',
  AMQP_DEAD_LETTER_QUEUE: 'durable queue bound to it with `#`, so dead-lettered messages are kept',
  AMQP_QUEUE_TYPE:
    '`classic` or `quorum`: the command and dead-letter queues as quorum queues (a RabbitMQ cluster), the command queues ' +
    'capped at `AMQP_MAX_DELIVERIES` deliveries by the broker too (`x-delivery-limit`: a message whose consumer keeps dying ' +
    'with it); see [docs/scaling.md](docs/scaling.md)',
  AMQP_PREFETCH: 'unacknowledged command deliveries per replica',
  AMQP_MAX_DELIVERIES:
    'deliveries of a command that fail unexpectedly before it is dead-lettered (`delivery-limit`); outages and a busy database do not count',
  AMQP_RETRY_DELAY_MS: 'wait before a transiently failed delivery is requeued; doubles up to `AMQP_RETRY_MAX_DELAY_MS`',
  AMQP_RETRY_MAX_DELAY_MS: "longest wait before a requeue; also caps the consumer's reconnect delay",
  OUTBOX_RELAY_INTERVAL_MS: 'how often the relay looks for events when no commit woke it',
  OUTBOX_RELAY_BATCH_SIZE: 'events per relay transaction',
  OUTBOX_RELAY_MAX_BACKOFF_MS: 'longest wait between relay attempts (and publisher reconnects) while the broker is unreachable',
  OUTBOX_PUBLISH_TIMEOUT_MS:
    'how long a batch waits for the publisher confirms of one round (one event per book) before they count as failed and go again',
  OUTBOX_RETENTION_DAYS: 'published events older than this are pruned by the retention job; pending ones never are',
};
