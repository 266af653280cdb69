/**
 * Torture run: several service processes on one PostgreSQL, many at-least-once clients, and faults
 * injected at random moments (kill -9 of a service, pg_terminate_backend of its connections, a fast
 * PostgreSQL restart). At the end the invariants are read from the database; any violation exits 1.
 *
 *   npm run torture                 the long variant (>= 10 min, >= 20 of each service fault)
 *   npm run torture -- --short      the CI variant (under 3 min, a few of each fault, no PostgreSQL restart)
 *   npm run torture -- --amqp [--short]   commands over RabbitMQ, events out through the outbox, kill -9 and a
 *                                   RabbitMQ restart (scripts/torture-amqp.ts)
 *
 * Options (flags or environment):
 *   --short | TORTURE_SHORT=1            the CI variant
 *   --seed N | TORTURE_SEED=N            reproduce the same message plan (timings still vary)
 *   --keep | TORTURE_KEEP=1              keep the database (and an own cluster) and the service logs
 *                                        (the logs are kept anyway when an invariant is violated)
 *   TORTURE_POSTGRES_URL / TEST_POSTGRES_URL   use this server (superuser) instead of an own cluster;
 *                                        the long variant uses only TORTURE_POSTGRES_URL, because it
 *                                        restarts PostgreSQL and so needs a cluster of its own
 *   TORTURE_TRAFFIC_S, TORTURE_CLIENTS   override the variant's traffic time and client count
 *
 * Traffic goes to 127.0.0.1 only. Every loop is bounded in count and time, and every process and
 * cluster this script starts is stopped at the end, on failure and on Ctrl-C.
 */
import { execFile, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { createWriteStream, mkdtempSync, rmSync, type WriteStream } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import canonicalize from 'canonicalize';
import pg from 'pg';
import { freePort } from './free-port.js';
import { mulberry32 } from './seeded-random.js';

const execFileAsync = promisify(execFile);
const repoRoot = fileURLToPath(new URL('..', import.meta.url));
const throwawayScript = join(repoRoot, 'scripts', 'pg-throwaway.sh');

const RESERVE = 'inventory.reserve-stock';
const RELEASE = 'inventory.release-stock';
const ADMIN_TOKEN = `torture-${randomBytes(12).toString('hex')}`;
const CE_SOURCE = 'urn:torture';
/** The service names its pool connections so; pg_terminate_backend aims at these only. */
const SERVICE_APPLICATION_NAME = 'bookstore-inventory';

// ---------------------------------------------------------------------------------------------
// Plan

interface Plan {
  variant: 'short' | 'long';
  trafficMs: number;
  /** After traffic stops, how long clients may take to get their last messages acknowledged. */
  drainMs: number;
  processes: number;
  clients: number;
  books: number;
  initialOnHand: [number, number];
  kills: number;
  connectionKills: number;
  pgRestarts: number;
  requestTimeoutMs: number;
  /** fast-check cases for test/fuzz.test.ts, run against the cluster after the traffic (0: skip). */
  fuzzRuns: number;
  /** Wall-clock bound on the whole run; the watchdog aborts past it. */
  hardLimitMs: number;
}

function flag(name: string): boolean {
  return process.argv.includes(`--${name}`);
}

function option(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

function envNumber(name: string): number | undefined {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return undefined;
  const value = Number(raw);
  if (!Number.isFinite(value) || value <= 0) throw new Error(`${name} must be a positive number, got "${raw}"`);
  return value;
}

function makePlan(): Plan {
  const short = flag('short') || process.env.TORTURE_SHORT === '1';
  const base: Plan = short
    ? {
        variant: 'short',
        trafficMs: 75_000,
        drainMs: 30_000,
        processes: 2,
        clients: 16,
        books: 10,
        initialOnHand: [15, 40],
        kills: 4,
        connectionKills: 5,
        pgRestarts: 0,
        requestTimeoutMs: 10_000,
        fuzzRuns: 0,
        hardLimitMs: 170_000,
      }
    : {
        variant: 'long',
        trafficMs: 630_000,
        drainMs: 45_000,
        processes: 3,
        clients: 24,
        books: 16,
        initialOnHand: [15, 40],
        kills: 24,
        connectionKills: 26,
        pgRestarts: 4,
        requestTimeoutMs: 10_000,
        fuzzRuns: 5000,
        hardLimitMs: 1_500_000,
      };
  const trafficS = envNumber('TORTURE_TRAFFIC_S');
  const clients = envNumber('TORTURE_CLIENTS');
  return {
    ...base,
    ...(trafficS === undefined ? {} : { trafficMs: trafficS * 1000, hardLimitMs: base.hardLimitMs - base.trafficMs + trafficS * 1000 }),
    ...(clients === undefined ? {} : { clients: Math.trunc(clients) }),
  };
}

// ---------------------------------------------------------------------------------------------
// Seeded randomness: the message plan of a run can be replayed with --seed

type Rng = () => number;
const between = (rng: Rng, min: number, max: number) => min + Math.floor(rng() * (max - min + 1));
const pick = <T>(rng: Rng, items: readonly T[]): T => items[Math.floor(rng() * items.length)]!;
/** A uuid from the seeded generator, so a seed reproduces the same orders and books. */
function seededUuid(rng: Rng): string {
  const hex = Array.from({ length: 32 }, () => Math.floor(rng() * 16).toString(16)).join('');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-4${hex.slice(13, 16)}-${'89ab'[Math.floor(rng() * 4)]}${hex.slice(17, 20)}-${hex.slice(20)}`;
}

// ---------------------------------------------------------------------------------------------
// Bookkeeping

const started = Date.now();
const elapsed = () => Date.now() - started;
const stamp = () => `[${(elapsed() / 1000).toFixed(1).padStart(6)}s]`;
function say(line: string): void {
  process.stdout.write(`${stamp()} ${line}\n`);
}

const stats = {
  messages: 0,
  producerDuplicates: 0,
  racingDuplicates: 0,
  deliveries: 0,
  /** Copies sent on purpose: the second of a simultaneous pair and re-deliveries after an acknowledgement. */
  duplicates: 0,
  simultaneousPairs: 0,
  retries: 0,
  acknowledgements: 0,
  processed201: 0,
  replayed200: 0,
  inFlight409: 0,
  status5xx: 0,
  status5xxDuringFaults: 0,
  status5xxByCode: new Map<number, number>(),
  networkErrors: 0,
  timeouts: 0,
  refused: 0,
  restocks: 0,
  restocksRefused: 0,
  crashes: 0,
  connectionKillEvents: 0,
  backendsKilled: 0,
  pgRestarts: 0,
  startupFailures: 0,
  unexpectedExits: 0,
  unacknowledged: 0,
};

interface Violation {
  kind: string;
  detail: string;
}
const violations: Violation[] = [];
function violation(kind: string, detail: string): void {
  violations.push({ kind, detail });
  if (violations.length <= 50) say(`VIOLATION ${kind}: ${detail}`);
}

/** When each fault was under way; a 5xx overlapping one of these is an expected consequence. */
const faultWindows: { kind: string; start: number; end: number }[] = [];
const FAULT_GRACE_MS = 3000;
function openFault(kind: string): { close(): void } {
  const window = { kind, start: Date.now(), end: Number.POSITIVE_INFINITY };
  faultWindows.push(window);
  return {
    close() {
      window.end = Date.now();
    },
  };
}
function overlapsFault(from: number, to: number): boolean {
  return faultWindows.some((w) => from <= w.end + FAULT_GRACE_MS && to >= w.start);
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL: an own throwaway cluster, or a database on a given server

interface Cluster {
  /** Admin URL (the postgres database). */
  adminUrl: string;
  /** Set when this run owns the cluster and may restart it. */
  dir: string | undefined;
}

async function startCluster(): Promise<Cluster> {
  const dir = mkdtempSync(join(tmpdir(), 'torture-pg-'));
  say(`starting a throwaway PostgreSQL cluster in ${dir}`);
  const { stdout } = await execFileAsync(throwawayScript, ['start', dir], { timeout: 120_000 });
  return { adminUrl: stdout.trim(), dir };
}

function stopClusterSync(cluster: Cluster): void {
  if (cluster.dir === undefined) return;
  spawnSync(throwawayScript, ['stop', cluster.dir], { stdio: 'ignore', timeout: 90_000 });
}

async function restartCluster(cluster: Cluster): Promise<void> {
  if (cluster.dir === undefined) throw new Error('cannot restart a cluster this run does not own');
  await execFileAsync(throwawayScript, ['restart', cluster.dir], { timeout: 120_000 });
}

async function withAdmin<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000, application_name: 'torture-driver' });
  // A fault may end this connection too; the error surfaces on the query, the listener keeps the process alive.
  client.on('error', () => {});
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => {});
  }
}

function databaseUrl(adminUrl: string, name: string): string {
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

// ---------------------------------------------------------------------------------------------
// Service processes

class Service {
  child: ChildProcess | undefined;
  up = false;
  /** Set while this run kills or restarts the process, so its exit is not taken for a crash. */
  expectingExit = false;
  private readonly tail: string[] = [];
  readonly errorLogs = new Map<string, number>();
  private readonly log: WriteStream;

  constructor(
    readonly index: number,
    readonly port: number,
    private readonly env: Record<string, string>,
    logDir: string,
  ) {
    this.log = createWriteStream(join(logDir, `service-${index}.log`), { flags: 'a' });
    // Output may still drain after the log is closed at the end; losing that is fine, crashing is not.
    this.log.on('error', () => {});
  }

  get baseUrl(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** Spawns the process and waits until it answers /health/live; retries a start that fails (e.g. while PostgreSQL restarts). */
  async start(deadline: number): Promise<void> {
    for (let attempt = 1; attempt <= 40 && Date.now() < deadline; attempt++) {
      const child = this.spawn();
      const live = await this.waitLive(child, Math.min(deadline, Date.now() + 60_000));
      if (live) {
        this.up = true;
        return;
      }
      stats.startupFailures++;
      const duringFault = overlapsFault(Date.now() - 60_000, Date.now());
      if (!duringFault) violation('startup-failure', `service ${this.index} failed to start outside any fault: ${this.tail.slice(-5).join(' | ')}`);
      else say(`service ${this.index} failed to start during a fault (attempt ${attempt}); retrying`);
      this.expectingExit = true;
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGKILL');
        await new Promise((resolve) => child.once('exit', resolve));
      }
      this.expectingExit = false;
      await sleep(500 + attempt * 250);
    }
    throw new Error(`service ${this.index} did not start`);
  }

  private spawn(): ChildProcess {
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/server.ts'], {
      cwd: repoRoot,
      env: { ...this.env, PORT: String(this.port) },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.child = child;
    child.on('error', (error) => this.tail.push(`spawn error: ${describeError(error)}`));
    this.log.write(`\n--- ${new Date().toISOString()} start pid ${child.pid}\n`);
    for (const stream of [child.stdout!, child.stderr!]) {
      let pending = '';
      stream.on('data', (chunk: Buffer) => {
        this.log.write(chunk);
        pending += chunk.toString();
        const lines = pending.split('\n');
        pending = lines.pop() ?? '';
        for (const line of lines) this.observe(line);
      });
    }
    child.once('exit', (code, signal) => {
      this.log.write(`--- ${new Date().toISOString()} exit code ${code} signal ${signal}\n`);
      // An exit before the process was live is a failed start, which start() itself retries.
      const wasUp = this.child === child && this.up;
      if (this.child === child) this.up = false;
      if (wasUp && !this.expectingExit && !shuttingDown) {
        stats.unexpectedExits++;
        violation('unexpected-exit', `service ${this.index} (pid ${child.pid}) exited on its own: code ${code} signal ${signal}; last output: ${this.tail.slice(-8).join(' | ')}`);
        // It must come back, or the clients would only have the other processes.
        void this.start(Date.now() + 120_000).catch((error) => violation('restart-failed', String(error)));
      }
    });
    return child;
  }

  private observe(line: string): void {
    if (line.trim() === '') return;
    this.tail.push(line.slice(0, 400));
    if (this.tail.length > 40) this.tail.shift();
    if (!line.startsWith('{')) return;
    try {
      const entry = JSON.parse(line) as { level?: number; msg?: string; err?: { type?: string; message?: string; code?: string } };
      if ((entry.level ?? 0) >= 50) {
        const key = `${entry.msg ?? '?'}: ${entry.err?.type ?? ''} ${entry.err?.code ?? ''} ${(entry.err?.message ?? '').slice(0, 120)}`;
        this.errorLogs.set(key, (this.errorLogs.get(key) ?? 0) + 1);
      }
    } catch {
      // a partial or non-JSON line: kept in the tail only
    }
  }

  private async waitLive(child: ChildProcess, deadline: number): Promise<boolean> {
    while (Date.now() < deadline) {
      if (child.exitCode !== null || child.signalCode !== null) return false;
      try {
        const res = await fetch(`${this.baseUrl}/health/live`, { signal: AbortSignal.timeout(1000) });
        await res.arrayBuffer();
        if (res.ok) return true;
      } catch {
        // not listening yet
      }
      await sleep(100);
    }
    return false;
  }

  /** kill -9: no graceful close, in-flight transactions die with their connections. */
  async kill9(): Promise<void> {
    const child = this.child;
    if (child === undefined || child.exitCode !== null || child.signalCode !== null) return;
    this.expectingExit = true;
    this.up = false;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
    this.expectingExit = false;
  }

  killSync(): void {
    this.expectingExit = true;
    const child = this.child;
    if (child !== undefined && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }

  async stop(): Promise<void> {
    this.expectingExit = true;
    const child = this.child;
    if (child !== undefined && child.exitCode === null && child.signalCode === null) {
      // 'close', not 'exit': the process's output has been written to the log by then.
      const exited = new Promise((resolve) => child.once('close', resolve));
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    }
    await new Promise((resolve) => this.log.end(resolve));
  }
}

let shuttingDown = false;

// ---------------------------------------------------------------------------------------------
// HTTP

interface Answer {
  status: number;
  body: any;
  replayed: boolean;
  retryAfterMs: number | undefined;
}

type SendResult = { ok: true; answer: Answer } | { ok: false; error: string };

function pickTarget(rng: Rng, services: readonly Service[], exclude?: Service): Service {
  const candidates = services.filter((s) => s !== exclude);
  const up = candidates.filter((s) => s.up);
  // Mostly to a live process, as a load balancer would; sometimes to a dead one, as a stale one would.
  return pick(rng, up.length > 0 && rng() < 0.9 ? up : candidates);
}

async function httpRequest(
  service: Service,
  method: string,
  path: string,
  headers: Record<string, string>,
  body: string | undefined,
  timeoutMs: number,
): Promise<SendResult> {
  const sentAt = Date.now();
  try {
    const res = await fetch(`${service.baseUrl}${path}`, {
      method,
      headers,
      ...(body === undefined ? {} : { body }),
      signal: AbortSignal.timeout(timeoutMs),
    });
    const text = await res.text();
    let parsed: unknown;
    try {
      parsed = text === '' ? undefined : JSON.parse(text);
    } catch {
      parsed = text;
    }
    if (res.status >= 500) {
      stats.status5xx++;
      stats.status5xxByCode.set(res.status, (stats.status5xxByCode.get(res.status) ?? 0) + 1);
      if (overlapsFault(sentAt, Date.now())) stats.status5xxDuringFaults++;
      else violation('5xx-outside-faults', `${method} ${path} on service ${service.index}: ${res.status} ${text.slice(0, 300)}`);
    }
    const retryAfter = res.headers.get('retry-after');
    return {
      ok: true,
      answer: {
        status: res.status,
        body: parsed,
        replayed: res.headers.get('idempotent-replayed') === 'true',
        retryAfterMs: retryAfter === null || !/^\d+$/.test(retryAfter) ? undefined : Number(retryAfter) * 1000,
      },
    };
  } catch (error) {
    stats.networkErrors++;
    const text = describeError(error);
    if (/timeout|aborted/i.test(text)) stats.timeouts++;
    if (/ECONNREFUSED/.test(text)) stats.refused++;
    return { ok: false, error: text };
  }
}

function describeError(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = error.cause instanceof Error ? ` (${(error.cause as { code?: string }).code ?? ''} ${error.cause.message})` : '';
  return `${error.name}: ${error.message}${cause}`;
}

// ---------------------------------------------------------------------------------------------
// Messages and the clients' model of what must have happened

type Form = 'body' | 'idempotency-key' | 'both' | 'cloudevent-structured' | 'cloudevent-binary';

interface OrderPlacedData {
  orderId: string;
  bookId: string;
  quantity: number;
}
interface OrderCancelledData {
  orderId: string;
  bookId?: string;
}

interface Ack {
  httpStatus: number;
  body: any;
}

interface Message {
  client: number;
  id: string;
  /** The inbox key the service derives from the chosen form. */
  key: string;
  consumer: typeof RESERVE | typeof RELEASE;
  form: Form;
  data: OrderPlacedData | OrderCancelledData;
  acks: Ack[];
}

/** One line of an order (order, book) as a client knows it, from the outcomes it was acknowledged. */
interface Line {
  orderId: string;
  bookId: string;
  quantity: number;
  state: 'none' | 'reserved' | 'released';
  reservedBy?: string;
  releasedBy?: string;
}

const allMessages: Message[] = [];
const allLines = new Map<string, Line>();
const lineKey = (orderId: string, bookId: string) => `${orderId}/${bookId}`;

function routeOf(message: Message): string {
  return message.consumer === RESERVE ? '/inventory/order-placed' : '/inventory/order-cancelled';
}

function messageType(message: Message): string {
  return message.consumer === RESERVE ? 'bookstore.order-placed' : 'bookstore.order-cancelled';
}

/** The request for one delivery of a message in its form; every delivery of a message is byte-identical. */
function requestOf(message: Message): { headers: Record<string, string>; body: string } {
  const json = { 'content-type': 'application/json' };
  switch (message.form) {
    case 'body':
      return { headers: json, body: JSON.stringify({ messageId: message.id, type: messageType(message), data: message.data }) };
    case 'idempotency-key':
      // Half of them as an RFC 8941 string, which the service must read as the same key.
      return {
        headers: { ...json, 'idempotency-key': message.id.length % 2 === 0 ? `"${message.id}"` : message.id },
        body: JSON.stringify({ data: message.data }),
      };
    case 'both':
      return { headers: { ...json, 'idempotency-key': message.id }, body: JSON.stringify({ messageId: message.id, data: message.data }) };
    case 'cloudevent-structured':
      return {
        headers: { 'content-type': 'application/cloudevents+json' },
        body: JSON.stringify({ specversion: '1.0', id: message.id, source: CE_SOURCE, type: messageType(message), data: message.data }),
      };
    case 'cloudevent-binary':
      return {
        headers: { ...json, 'ce-specversion': '1.0', 'ce-id': message.id, 'ce-source': CE_SOURCE, 'ce-type': messageType(message) },
        body: JSON.stringify(message.data),
      };
  }
}

function keyOf(id: string, form: Form): string {
  return form === 'cloudevent-structured' || form === 'cloudevent-binary' ? `${CE_SOURCE}|${id}` : id;
}

const same = (a: unknown, b: unknown) => canonicalize(a) === canonicalize(b);

/**
 * Checks one acknowledgement against the message's earlier ones: one record, so the same outcome and
 * timestamps every time, and at most one 201 (two would mean the message took effect twice).
 */
function recordAck(message: Message, answer: Answer): void {
  stats.acknowledgements++;
  const body = answer.body;
  const where = `${message.consumer} ${message.key}`;
  if (answer.status === 201) stats.processed201++;
  else stats.replayed200++;
  if (typeof body !== 'object' || body === null) {
    violation('ack-body', `${where}: ${answer.status} without a JSON body`);
    return;
  }
  const expectedStatus = answer.status === 201 ? 'processed' : 'duplicate';
  if (body.status !== expectedStatus) violation('ack-body', `${where}: HTTP ${answer.status} with status "${body.status}"`);
  if (answer.status === 200 && !answer.replayed) violation('ack-body', `${where}: 200 without Idempotent-Replayed: true`);
  if (body.messageId !== message.key || body.consumer !== message.consumer) {
    violation('ack-body', `${where}: answered for ${body.consumer} ${body.messageId}`);
  }
  const first = message.acks[0];
  if (first !== undefined) {
    if (answer.status === 201 && message.acks.some((a) => a.httpStatus === 201)) {
      violation('processed-twice', `${where}: a second 201 (the message took effect twice)`);
    }
    if (!same(first.body.outcome, body.outcome)) {
      violation('replay-differs', `${where}: outcome ${canonicalize(body.outcome)} after ${canonicalize(first.body.outcome)}`);
    }
    if (first.body.receivedAt !== body.receivedAt || first.body.processedAt !== body.processedAt) {
      violation('replay-differs', `${where}: record times ${body.receivedAt}/${body.processedAt} after ${first.body.receivedAt}/${first.body.processedAt}`);
    }
  }
  message.acks.push({ httpStatus: answer.status, body });
}

/** Applies the first acknowledged outcome of an order-placed to the client's model, checking it fits. */
function applyReserve(message: Message, line: Line): void {
  const outcome = message.acks[0]!.body.outcome;
  const data = message.data as OrderPlacedData;
  const where = `${RESERVE} ${message.key} (${line.orderId}/${line.bookId}, state ${line.state})`;
  if (outcome.orderId !== data.orderId || outcome.bookId !== data.bookId || outcome.quantity !== data.quantity) {
    violation('wrong-outcome', `${where}: outcome for ${canonicalize(outcome)}`);
    return;
  }
  if (line.state === 'none') {
    if (outcome.result === 'reserved') {
      line.state = 'reserved';
      line.reservedBy = message.key;
    } else if (outcome.result === 'insufficient-stock') {
      if (!(outcome.available < data.quantity && outcome.available >= 0)) {
        violation('wrong-outcome', `${where}: insufficient-stock with ${outcome.available} available for ${data.quantity}`);
      }
    } else {
      violation('wrong-outcome', `${where}: ${outcome.result} for an order line that holds no reservation`);
    }
    return;
  }
  if (
    outcome.result !== 'already-reserved' ||
    outcome.existing?.reservedBy !== line.reservedBy ||
    outcome.existing?.quantity !== line.quantity ||
    outcome.existing?.released !== (line.state === 'released')
  ) {
    violation('wrong-outcome', `${where}: expected already-reserved by ${line.reservedBy}, got ${canonicalize(outcome)}`);
  }
}

/** Applies the first acknowledged outcome of an order-cancelled: exactly the live lines are released. */
function applyRelease(message: Message, lines: Line[]): void {
  const outcome = message.acks[0]!.body.outcome;
  const data = message.data as OrderCancelledData;
  const live = lines
    .filter((l) => l.state === 'reserved' && (data.bookId === undefined || l.bookId === data.bookId))
    .sort((a, b) => (a.bookId < b.bookId ? -1 : 1));
  const expected =
    live.length === 0
      ? { result: 'not-reserved', orderId: data.orderId }
      : { result: 'released', orderId: data.orderId, released: live.map((l) => ({ bookId: l.bookId, quantity: l.quantity })) };
  if (!same(outcome, expected)) {
    violation('wrong-outcome', `${RELEASE} ${message.key}: expected ${canonicalize(expected)}, got ${canonicalize(outcome)}`);
    return;
  }
  for (const l of live) {
    l.state = 'released';
    l.releasedBy = message.key;
  }
}

// ---------------------------------------------------------------------------------------------
// Clients

interface ClientContext {
  plan: Plan;
  services: Service[];
  books: string[];
  trafficEnd: number;
  drainEnd: () => number;
}

class Client {
  private seq = 0;
  private readonly orders = new Map<string, Line[]>();
  private readonly rng: Rng;

  constructor(
    readonly index: number,
    seed: number,
    private readonly ctx: ClientContext,
  ) {
    this.rng = mulberry32(seed);
  }

  private newMessage(consumer: Message['consumer'], data: Message['data']): Message {
    const rng = this.rng;
    const form = pick<Form>(rng, ['body', 'body', 'body', 'body', 'idempotency-key', 'both', 'cloudevent-structured', 'cloudevent-binary']);
    const id = `t${this.index}-${++this.seq}-${seededUuid(rng).slice(0, 8)}`;
    const message: Message = { client: this.index, id, key: keyOf(id, form), consumer, form, data, acks: [] };
    allMessages.push(message);
    stats.messages++;
    return message;
  }

  private line(orderId: string, bookId: string, quantity: number): Line {
    const key = lineKey(orderId, bookId);
    let line = allLines.get(key);
    if (line === undefined) {
      line = { orderId, bookId, quantity, state: 'none' };
      allLines.set(key, line);
      const lines = this.orders.get(orderId) ?? [];
      lines.push(line);
      this.orders.set(orderId, lines);
    }
    return line;
  }

  private quantity(): number {
    // Mostly small orders; now and then a big one, so that stock runs short.
    return this.rng() < 0.85 ? between(this.rng, 1, 4) : between(this.rng, 5, 40);
  }

  async run(): Promise<void> {
    const rng = this.rng;
    for (let step = 0; step < 100_000 && Date.now() < this.ctx.trafficEnd; step++) {
      const orders = [...this.orders.entries()];
      const lines = orders.flatMap(([, l]) => l);
      const r = rng();
      if (r < 0.42 || lines.length === 0) {
        // A new order, or another book on a recent one.
        const recent = orders.slice(-3);
        const orderId = recent.length > 0 && rng() < 0.15 ? pick(rng, recent)[0] : seededUuid(rng);
        const bookId = pick(rng, this.ctx.books);
        if (allLines.has(lineKey(orderId, bookId))) continue;
        await this.placeOrder(this.line(orderId, bookId, this.quantity()));
      } else if (r < 0.52) {
        // A producer duplicate: the same order line under a new message id.
        stats.producerDuplicates++;
        await this.placeOrder(pick(rng, lines));
      } else if (r < 0.56) {
        await this.racingDuplicates(this.line(seededUuid(rng), pick(rng, this.ctx.books), this.quantity()));
      } else if (r < 0.82) {
        const live = orders.filter(([, l]) => l.some((x) => x.state === 'reserved'));
        const [orderId, orderLines] = live.length > 0 && rng() < 0.8 ? pick(rng, live) : pick(rng, orders);
        const bookId = rng() < 0.4 ? pick(rng, orderLines).bookId : undefined;
        await this.cancel(orderId, bookId);
      } else if (r < 0.88) {
        // A cancellation sent again under a new id (a producer duplicate of a cancel).
        const released = lines.filter((l) => l.state === 'released');
        const target = released.length > 0 ? pick(rng, released) : pick(rng, lines);
        stats.producerDuplicates++;
        await this.cancel(target.orderId, rng() < 0.5 ? target.bookId : undefined);
      } else {
        // A late OrderPlaced for a line that was cancelled: must not reserve again.
        const released = lines.filter((l) => l.state === 'released');
        if (released.length === 0) continue;
        stats.producerDuplicates++;
        await this.placeOrder(pick(rng, released));
      }
    }
  }

  private async placeOrder(line: Line): Promise<void> {
    const message = this.newMessage(RESERVE, { orderId: line.orderId, bookId: line.bookId, quantity: line.quantity });
    if (await this.deliver(message)) applyReserve(message, line);
  }

  private async cancel(orderId: string, bookId: string | undefined): Promise<void> {
    const message = this.newMessage(RELEASE, bookId === undefined ? { orderId } : { orderId, bookId });
    if (await this.deliver(message)) applyRelease(message, this.orders.get(orderId) ?? []);
  }

  /** Two messages for one new order line at the same moment: at most one may reserve. */
  private async racingDuplicates(line: Line): Promise<void> {
    stats.racingDuplicates++;
    const data = { orderId: line.orderId, bookId: line.bookId, quantity: line.quantity };
    const a = this.newMessage(RESERVE, data);
    const b = this.newMessage(RESERVE, { ...data });
    const [okA, okB] = await Promise.all([this.deliver(a), this.deliver(b)]);
    if (!okA || !okB) return;
    const outcomes = [a, b].map((m) => m.acks[0]!.body.outcome);
    const winners = [a, b].filter((m, i) => outcomes[i].result === 'reserved');
    if (winners.length > 1) {
      violation('double-reservation', `racing ${a.key} and ${b.key} both reserved ${line.orderId}/${line.bookId}`);
      return;
    }
    const winner = winners[0];
    for (const [i, m] of [a, b].entries()) {
      const outcome = outcomes[i];
      if (outcome.result === 'already-reserved' && (winner === undefined || outcome.existing?.reservedBy !== winner.key || outcome.existing?.released !== false)) {
        violation('wrong-outcome', `racing ${m.key}: ${canonicalize(outcome)} but the reserving message is ${winner?.key ?? 'none'}`);
      } else if (outcome.result !== 'reserved' && outcome.result !== 'already-reserved' && outcome.result !== 'insufficient-stock') {
        violation('wrong-outcome', `racing ${m.key}: ${canonicalize(outcome)}`);
      }
    }
    if (winner !== undefined) {
      line.state = 'reserved';
      line.reservedBy = winner.key;
    }
  }

  /**
   * At-least-once delivery: until a 2xx, to a random process, on any error, timeout or refused
   * connection. Sometimes the first delivery goes to two processes at once; sometimes the message is
   * delivered again after its acknowledgement.
   */
  private async deliver(message: Message): Promise<boolean> {
    const acked = await this.deliverUntilAck(message, this.rng() < 0.12);
    if (!acked) {
      stats.unacknowledged++;
      violation('unacknowledged', `${message.consumer} ${message.key} got no 2xx before the drain deadline`);
      return false;
    }
    if (this.rng() < 0.2 && Date.now() < this.ctx.trafficEnd) {
      const extra = between(this.rng, 1, 2);
      for (let i = 0; i < extra; i++) {
        stats.duplicates++;
        await this.deliverUntilAck(message, this.rng() < 0.3);
      }
    }
    return true;
  }

  private async deliverUntilAck(message: Message, simultaneous: boolean): Promise<boolean> {
    const { services, plan } = this.ctx;
    const { headers, body } = requestOf(message);
    let backoffMs = 50;
    for (let attempt = 1; attempt <= 1000; attempt++) {
      if (Date.now() > this.ctx.drainEnd()) return false;
      if (attempt > 1) stats.retries++;
      const first = pickTarget(this.rng, services);
      const targets = simultaneous && attempt === 1 && services.length > 1 ? [first, pickTarget(this.rng, services, first)] : [first];
      if (targets.length === 2) {
        stats.simultaneousPairs++;
        stats.duplicates++;
      }
      stats.deliveries += targets.length;
      const results = await Promise.all(targets.map((t) => httpRequest(t, 'POST', routeOf(message), headers, body, plan.requestTimeoutMs)));
      let acked = false;
      let waitMs: number | undefined;
      for (const result of results) {
        if (!result.ok) continue;
        const { answer } = result;
        if (answer.status === 200 || answer.status === 201) {
          recordAck(message, answer);
          acked = true;
        } else if (answer.status === 409 && answer.body?.type === '/problems/in-flight') {
          stats.inFlight409++;
          waitMs = Math.max(waitMs ?? 0, answer.retryAfterMs ?? 1000);
        } else if (answer.status < 500) {
          violation('refused', `${message.consumer} ${message.key} (${message.form}): ${answer.status} ${JSON.stringify(answer.body).slice(0, 300)}`);
          return false;
        } else if (answer.retryAfterMs !== undefined) {
          waitMs = Math.max(waitMs ?? 0, Math.min(answer.retryAfterMs, 2000));
        }
      }
      if (acked) return true;
      if (waitMs !== undefined) {
        await sleep(waitMs * (0.5 + this.rng() * 0.5));
      } else {
        backoffMs = Math.min(backoffMs * 2, 1500);
        await sleep(backoffMs * (0.5 + this.rng()));
      }
    }
    return false;
  }
}

/** An operator restocking now and then with absolute values (PUT), never below what is reserved. */
async function restocker(ctx: ClientContext, rng: Rng): Promise<void> {
  const headers = { 'content-type': 'application/json', authorization: `Bearer ${ADMIN_TOKEN}` };
  for (let round = 0; round < 10_000 && Date.now() < ctx.trafficEnd; round++) {
    await sleep(between(rng, 300, 1500));
    const bookId = pick(rng, ctx.books);
    const read = await httpRequest(pickTarget(rng, ctx.services), 'GET', `/stock/${bookId}`, {}, undefined, ctx.plan.requestTimeoutMs);
    if (!read.ok || read.answer.status !== 200) continue;
    const onHand = (read.answer.body.reserved as number) + between(rng, 0, 25);
    for (let attempt = 0; attempt < 20 && Date.now() < ctx.trafficEnd; attempt++) {
      const put = await httpRequest(
        pickTarget(rng, ctx.services),
        'PUT',
        `/stock/${bookId}`,
        headers,
        JSON.stringify({ title: `Torture book ${ctx.books.indexOf(bookId)}`, onHand }),
        ctx.plan.requestTimeoutMs,
      );
      if (put.ok && put.answer.status === 200) {
        stats.restocks++;
        break;
      }
      if (put.ok && put.answer.status === 409 && put.answer.body?.type === '/problems/stock-below-reserved') {
        stats.restocksRefused++;
        break;
      }
      if (put.ok && put.answer.status < 500) {
        violation('refused', `PUT /stock/${bookId}: ${put.answer.status} ${JSON.stringify(put.answer.body).slice(0, 300)}`);
        break;
      }
      await sleep(200 + attempt * 100);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Faults

/** Spreads `count` moments over [from, to): one in each equal slice, at a random point of it. */
function schedule(rng: Rng, count: number, from: number, to: number): number[] {
  const slice = (to - from) / Math.max(count, 1);
  return Array.from({ length: count }, (_, i) => from + slice * (i + 0.1 + rng() * 0.8));
}

async function sleepUntil(at: number): Promise<void> {
  const wait = at - Date.now();
  if (wait > 0) await sleep(wait);
}

async function killLoop(services: Service[], times: number[], rng: Rng): Promise<void> {
  for (const at of times) {
    await sleepUntil(at);
    if (shuttingDown) return;
    let victim: Service | undefined;
    for (let wait = 0; wait < 100 && victim === undefined; wait++) {
      const up = services.filter((s) => s.up && !s.expectingExit);
      if (up.length > 0) victim = pick(rng, up);
      else await sleep(100);
    }
    if (victim === undefined) {
      say('kill -9: no process up to kill');
      continue;
    }
    const fault = openFault('kill -9');
    await victim.kill9();
    stats.crashes++;
    const pause = between(rng, 300, 2500);
    say(`kill -9 service ${victim.index} (#${stats.crashes}); restarting in ${pause} ms`);
    await sleep(pause);
    await victim.start(Date.now() + 120_000);
    fault.close();
  }
}

async function connectionKillLoop(adminUrl: string, dbName: string, times: number[], rng: Rng): Promise<void> {
  for (const at of times) {
    await sleepUntil(at);
    for (let attempt = 0; attempt < 30 && !shuttingDown; attempt++) {
      const fault = openFault('pg_terminate_backend');
      try {
        const everything = rng() < 0.5;
        const killed = await withAdmin(adminUrl, async (client) => {
          const { rows } = await client.query<{ pid: number }>(
            'select pid from pg_stat_activity where datname = $1 and application_name = $2 and pid <> pg_backend_pid()',
            [dbName, SERVICE_APPLICATION_NAME],
          );
          const chosen = everything ? rows : rows.filter(() => rng() < 0.5);
          if (chosen.length === 0 && rows.length > 0) chosen.push(pick(rng, rows));
          let n = 0;
          for (const { pid } of chosen) {
            const res = await client.query<{ ok: boolean }>('select pg_terminate_backend($1) as ok', [pid]);
            if (res.rows[0]?.ok) n++;
          }
          return n;
        });
        fault.close();
        if (killed > 0) {
          stats.connectionKillEvents++;
          stats.backendsKilled += killed;
          say(`pg_terminate_backend: ${killed} service connection(s) (#${stats.connectionKillEvents})`);
          break;
        }
      } catch (error) {
        fault.close();
        say(`pg_terminate_backend failed (${describeError(error)}); trying again`);
      }
      await sleep(300);
    }
  }
}

async function pgRestartLoop(cluster: Cluster, times: number[]): Promise<void> {
  for (const at of times) {
    await sleepUntil(at);
    if (shuttingDown) return;
    const fault = openFault('postgres restart');
    const t0 = Date.now();
    try {
      await restartCluster(cluster);
      stats.pgRestarts++;
      say(`PostgreSQL fast restart #${stats.pgRestarts} took ${Date.now() - t0} ms`);
    } catch (error) {
      violation('harness', `PostgreSQL restart failed: ${describeError(error)}`);
    }
    fault.close();
  }
}

// ---------------------------------------------------------------------------------------------
// Invariants, read from the database

interface ReservationRow {
  order_id: string;
  book_id: string;
  quantity: number;
  reserved_by: string;
  released_by: string | null;
  released_at: Date | null;
}
interface InboxRow {
  message_id: string;
  consumer: string;
  completed_at: Date | null;
  outcome: any;
}

async function checkInvariants(url: string): Promise<void> {
  await withAdmin(url, async (client) => {
    const stock = (await client.query<{ book_id: string; on_hand: number; reserved: number }>('select book_id, on_hand, reserved from stock_items')).rows;
    const reservations = (await client.query<ReservationRow>('select order_id, book_id, quantity, reserved_by, released_by, released_at from stock_reservations')).rows;
    const inbox = (await client.query<InboxRow>('select message_id, consumer, completed_at, outcome from inbox')).rows;
    const deadLetters = Number((await client.query<{ n: string }>('select count(*) as n from dead_letters')).rows[0]?.n ?? 0);
    say(`invariants: ${stock.length} books, ${reservations.length} reservations, ${inbox.length} inbox rows, ${deadLetters} dead letters`);

    const inboxByKey = new Map<string, InboxRow[]>();
    for (const row of inbox) {
      const k = `${row.consumer} ${row.message_id}`;
      inboxByKey.set(k, [...(inboxByKey.get(k) ?? []), row]);
    }
    const reservationsByLine = new Map(reservations.map((r) => [lineKey(r.order_id, r.book_id), r]));

    // Stock figures against the live reservations.
    const liveSum = new Map<string, number>();
    for (const r of reservations) if (r.released_at === null) liveSum.set(r.book_id, (liveSum.get(r.book_id) ?? 0) + r.quantity);
    for (const s of stock) {
      const live = liveSum.get(s.book_id) ?? 0;
      if (s.reserved !== live) violation('reserved-sum', `book ${s.book_id}: reserved ${s.reserved}, live reservations sum to ${live}`);
      if (s.reserved < 0 || s.reserved > s.on_hand) violation('stock-bounds', `book ${s.book_id}: reserved ${s.reserved}, on hand ${s.on_hand}`);
    }

    // Every reservation has the inbox row that made it, and its release the row that released it.
    for (const r of reservations) {
      const reservedBy = inboxByKey.get(`${RESERVE} ${r.reserved_by}`)?.[0];
      const o = reservedBy?.outcome;
      if (reservedBy === undefined) violation('orphan-reservation', `${r.order_id}/${r.book_id} reserved_by ${r.reserved_by} has no ${RESERVE} inbox row`);
      else if (o?.result !== 'reserved' || o.orderId !== r.order_id || o.bookId !== r.book_id || o.quantity !== r.quantity) {
        violation('orphan-reservation', `${r.order_id}/${r.book_id} reserved_by ${r.reserved_by}, whose recorded outcome is ${canonicalize(o)}`);
      }
      if ((r.released_by === null) !== (r.released_at === null)) violation('release-columns', `${r.order_id}/${r.book_id}: released_by ${r.released_by}, released_at ${String(r.released_at)}`);
      if (r.released_by !== null) {
        const ro = inboxByKey.get(`${RELEASE} ${r.released_by}`)?.[0]?.outcome;
        const listed = ro?.result === 'released' && (ro.released as { bookId: string; quantity: number }[]).some((x) => x.bookId === r.book_id && x.quantity === r.quantity);
        if (!listed || ro.orderId !== r.order_id) violation('orphan-release', `${r.order_id}/${r.book_id} released_by ${r.released_by}, whose recorded outcome is ${canonicalize(ro)}`);
      }
    }

    for (const row of inbox) {
      if (row.completed_at === null) violation('in-progress', `${row.consumer} ${row.message_id} is left in progress`);
    }
    if (deadLetters > 0) violation('dead-letters', `${deadLetters} dead letters, but every copy of a message was identical`);

    // Every acknowledged message took effect once, as acknowledged.
    const known = new Set(allMessages.map((m) => `${m.consumer} ${m.key}`));
    for (const k of inboxByKey.keys()) if (!known.has(k)) violation('foreign-inbox-row', `${k} was never sent`);
    const reservedBy = new Map<string, ReservationRow[]>();
    const releasedBy = new Map<string, ReservationRow[]>();
    for (const r of reservations) {
      reservedBy.set(r.reserved_by, [...(reservedBy.get(r.reserved_by) ?? []), r]);
      if (r.released_by !== null) releasedBy.set(r.released_by, [...(releasedBy.get(r.released_by) ?? []), r]);
    }
    for (const m of allMessages) {
      if (m.acks.length === 0) continue;
      const rows = inboxByKey.get(`${m.consumer} ${m.key}`) ?? [];
      if (rows.length !== 1) {
        violation('inbox-row-count', `${m.consumer} ${m.key}: ${rows.length} inbox rows for an acknowledged message`);
        continue;
      }
      const outcome = m.acks[0]!.body.outcome;
      if (!same(rows[0]!.outcome, outcome)) violation('recorded-outcome', `${m.consumer} ${m.key}: recorded ${canonicalize(rows[0]!.outcome)}, acknowledged ${canonicalize(outcome)}`);
      if (m.consumer === RESERVE) {
        const made = reservedBy.get(m.key) ?? [];
        const expected = outcome.result === 'reserved' ? 1 : 0;
        if (made.length !== expected) violation('reserve-effect', `${m.key} (${outcome.result}) reserved ${made.length} rows`);
      } else {
        const released = (releasedBy.get(m.key) ?? []).map((r) => ({ bookId: r.book_id, quantity: r.quantity })).sort((a, b) => (a.bookId < b.bookId ? -1 : 1));
        const expected = outcome.result === 'released' ? outcome.released : [];
        if (!same(released, expected)) violation('release-effect', `${m.key}: released ${canonicalize(released)}, acknowledged ${canonicalize(expected)}`);
      }
    }

    // The clients' own model of every order line agrees with the rows.
    for (const line of allLines.values()) {
      const row = reservationsByLine.get(lineKey(line.orderId, line.bookId));
      const where = `line ${line.orderId}/${line.bookId}`;
      if (line.state === 'none') {
        if (row !== undefined && stats.unacknowledged === 0) violation('model', `${where}: never acknowledged as reserved, yet reserved by ${row.reserved_by}`);
      } else if (row === undefined) {
        violation('model', `${where}: acknowledged ${line.state} by ${line.reservedBy}, but no reservation row`);
      } else if (row.reserved_by !== line.reservedBy || row.quantity !== line.quantity) {
        violation('model', `${where}: reserved_by ${row.reserved_by} x${row.quantity}, acknowledged ${line.reservedBy} x${line.quantity}`);
      } else if (line.state === 'released' ? row.released_by !== line.releasedBy : row.released_by !== null) {
        violation('model', `${where}: released_by ${row.released_by}, acknowledged ${line.releasedBy ?? 'live'}`);
      }
    }
  });
}

// ---------------------------------------------------------------------------------------------
// The long run also fuzzes the HTTP API with many cases (test/fuzz.test.ts) on this cluster.

async function runFuzz(runs: number, adminUrl: string, deadline: number): Promise<boolean> {
  say(`fuzz: test/fuzz.test.ts with FUZZ_RUNS=${runs}`);
  const child = spawn(process.execPath, ['--import', 'tsx', '--test', '--test-reporter=dot', 'test/fuzz.test.ts'], {
    cwd: repoRoot,
    env: { ...process.env, FUZZ_RUNS: String(runs), TEST_POSTGRES_URL: adminUrl, REQUIRE_POSTGRES: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  let output = '';
  child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), Math.max(1000, deadline - Date.now()));
  const code = await new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
  clearTimeout(timer);
  children.delete(child);
  const tail = output.trim().split('\n').slice(-12).join('\n');
  say(`fuzz: exit ${code}\n${tail}`);
  if (code !== 0) violation('fuzz', `test/fuzz.test.ts failed (exit ${code}); last lines: ${tail.slice(-1500)}`);
  return code === 0;
}

// ---------------------------------------------------------------------------------------------
// Main

const children = new Set<ChildProcess>();
let cleanupSync: () => void = () => {};

function summary(plan: Plan, seed: number, services: Service[], fuzzPassed: boolean | undefined): string {
  const byCode = [...stats.status5xxByCode.entries()].map(([c, n]) => `${c}: ${n}`).join(', ') || 'none';
  const errorLogs = new Map<string, number>();
  for (const s of services) for (const [k, n] of s.errorLogs) errorLogs.set(k, (errorLogs.get(k) ?? 0) + n);
  const lines = [
    `== torture summary (${plan.variant} variant, seed ${seed})`,
    `duration:                ${(elapsed() / 1000).toFixed(0)} s (traffic ${plan.trafficMs / 1000} s)`,
    `service processes:       ${plan.processes}, clients: ${plan.clients}, books: ${plan.books}`,
    `messages:                ${stats.messages} (producer duplicates ${stats.producerDuplicates}, racing pairs ${stats.racingDuplicates})`,
    `deliveries:              ${stats.deliveries} (retries ${stats.retries})`,
    `duplicates:              ${stats.duplicates} (simultaneous pairs to two processes ${stats.simultaneousPairs})`,
    `acknowledgements:        ${stats.acknowledgements} (201 processed ${stats.processed201}, 200 replayed ${stats.replayed200})`,
    `409 in flight:           ${stats.inFlight409}`,
    `5xx answers:             ${stats.status5xx} (during injected faults ${stats.status5xxDuringFaults}; ${byCode})`,
    `network errors:          ${stats.networkErrors} (refused ${stats.refused}, timeouts ${stats.timeouts})`,
    `restocks:                ${stats.restocks} (refused below reserved ${stats.restocksRefused})`,
    `crashes survived:        ${stats.crashes} (kill -9; startup retries ${stats.startupFailures}, unexpected exits ${stats.unexpectedExits})`,
    `connections killed:      ${stats.connectionKillEvents} (pg_terminate_backend events; ${stats.backendsKilled} backends)`,
    `restarts:                ${stats.pgRestarts} (PostgreSQL fast restarts)`,
    ...(fuzzPassed === undefined ? [] : [`fuzz (${plan.fuzzRuns} cases):     ${fuzzPassed ? 'passed' : 'FAILED'}`]),
    `unacknowledged messages: ${stats.unacknowledged}`,
    `invariant violations:    ${violations.length}`,
  ];
  if (errorLogs.size > 0) {
    lines.push('service error logs (level >= error):');
    for (const [k, n] of [...errorLogs.entries()].sort((a, b) => b[1] - a[1]).slice(0, 12)) lines.push(`  ${n} x ${k}`);
  }
  if (violations.length > 0) {
    const kinds = new Map<string, number>();
    for (const v of violations) kinds.set(v.kind, (kinds.get(v.kind) ?? 0) + 1);
    lines.push(`violations by kind: ${[...kinds.entries()].map(([k, n]) => `${k} ${n}`).join(', ')}`);
    for (const v of violations.slice(0, 20)) lines.push(`  ${v.kind}: ${v.detail.slice(0, 600)}`);
  }
  return lines.join('\n');
}

async function main(): Promise<number> {
  const plan = makePlan();
  const seedOption = option('seed') ?? process.env.TORTURE_SEED;
  const seed = seedOption === undefined ? randomBytes(4).readUInt32BE() : Number(seedOption) >>> 0;
  const keep = flag('keep') || process.env.TORTURE_KEEP === '1';
  const rng = mulberry32(seed);
  say(`torture (${plan.variant}): seed ${seed}, ${plan.processes} processes, ${plan.clients} clients, traffic ${plan.trafficMs / 1000} s, ` +
    `faults: ${plan.kills} kill -9, ${plan.connectionKills} connection kills, ${plan.pgRestarts} PostgreSQL restarts`);

  const givenUrl = process.env.TORTURE_POSTGRES_URL ?? (plan.variant === 'short' ? process.env.TEST_POSTGRES_URL : undefined);
  const cluster: Cluster = givenUrl !== undefined && givenUrl !== '' ? { adminUrl: givenUrl, dir: undefined } : await startCluster();
  if (cluster.dir === undefined && plan.pgRestarts > 0) {
    say(`a given server cannot be restarted: skipping the ${plan.pgRestarts} PostgreSQL restarts`);
    plan.pgRestarts = 0;
  }
  const dbName = `torture_${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
  const logDir = mkdtempSync(join(tmpdir(), 'torture-logs-'));
  const services: Service[] = [];

  let cleanedUp = false;
  cleanupSync = () => {
    if (cleanedUp) return;
    cleanedUp = true;
    shuttingDown = true;
    for (const s of services) s.killSync();
    for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
    if (!keep) stopClusterSync(cluster);
  };

  const watchdog = setTimeout(() => {
    violation('harness', `the run exceeded its hard limit of ${plan.hardLimitMs / 1000} s`);
    process.stdout.write(`${summary(plan, seed, services, undefined)}\n`);
    cleanupSync();
    process.exit(1);
  }, plan.hardLimitMs);
  watchdog.unref();

  let fuzzPassed: boolean | undefined;
  try {
    await withAdmin(cluster.adminUrl, (c) => c.query(`CREATE DATABASE ${dbName}`));
    const url = databaseUrl(cluster.adminUrl, dbName);
    say(`database ${dbName}; service logs in ${logDir}`);

    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('WEBHOOK_')) env[k] = v;
    Object.assign(env, { DATABASE_URL: url, HOST: '127.0.0.1', ADMIN_TOKEN, LOG_LEVEL: 'warn' });
    for (let i = 0; i < plan.processes; i++) services.push(new Service(i, await freePort(), env, logDir));
    // All at once: concurrent start-ups race on the migrations, as a rolling deploy would.
    await Promise.all(services.map((s) => s.start(Date.now() + 90_000)));
    say(`${services.length} service processes up on ports ${services.map((s) => s.port).join(', ')}`);

    const books = Array.from({ length: plan.books }, () => seededUuid(rng));
    for (const [i, bookId] of books.entries()) {
      const onHand = between(rng, plan.initialOnHand[0], plan.initialOnHand[1]);
      const res = await httpRequest(services[i % services.length]!, 'PUT', `/stock/${bookId}`, { 'content-type': 'application/json', authorization: `Bearer ${ADMIN_TOKEN}` }, JSON.stringify({ title: `Torture book ${i}`, onHand }), 10_000);
      if (!res.ok || res.answer.status !== 201) throw new Error(`seeding book ${i} failed: ${res.ok ? `${res.answer.status} ${JSON.stringify(res.answer.body)}` : res.error}`);
    }

    const trafficStart = Date.now();
    const trafficEnd = trafficStart + plan.trafficMs;
    let drainEnd = trafficEnd + plan.drainMs;
    const ctx: ClientContext = { plan, services, books, trafficEnd, drainEnd: () => drainEnd };
    // Faults fall between 5 s after the start and 5 s before the end, so the last one has settled when traffic stops.
    const faultFrom = trafficStart + 5000;
    const faultTo = trafficEnd - 8000;
    const faults = [
      killLoop(services, schedule(rng, plan.kills, faultFrom, faultTo), mulberry32(seed ^ 0x1111)),
      connectionKillLoop(cluster.adminUrl, dbName, schedule(rng, plan.connectionKills, faultFrom, faultTo), mulberry32(seed ^ 0x2222)),
      ...(plan.pgRestarts > 0 ? [pgRestartLoop(cluster, schedule(rng, plan.pgRestarts, faultFrom + 10_000, faultTo - 10_000))] : []),
    ];
    const progress = setInterval(() => {
      say(`progress: ${stats.messages} messages, ${stats.deliveries} deliveries, ${stats.acknowledgements} acks, ${stats.status5xx} 5xx, ` +
        `${stats.crashes} kills, ${stats.connectionKillEvents} connection kills, ${stats.pgRestarts} restarts, ${violations.length} violations`);
    }, plan.variant === 'short' ? 15_000 : 30_000);
    const clients = Array.from({ length: plan.clients }, (_, i) => new Client(i, seed + 1000 * (i + 1), ctx).run());
    const restock = restocker(ctx, mulberry32(seed ^ 0x3333));

    await Promise.all(faults);
    await Promise.all([...clients, restock]);
    drainEnd = Date.now();
    clearInterval(progress);
    say(`traffic over: ${stats.messages} messages, ${stats.acknowledgements} acknowledgements`);

    // Every process must be up again, and every message in, before the database is read.
    for (const s of services) if (!s.up) await s.start(Date.now() + 60_000);
    await checkInvariants(url);

    if (plan.fuzzRuns > 0) fuzzPassed = await runFuzz(plan.fuzzRuns, cluster.adminUrl, Date.now() + 600_000);

    const short = [
      [stats.crashes, plan.kills, 'kill -9'],
      [stats.connectionKillEvents, plan.connectionKills, 'connection kills'],
      [stats.pgRestarts, plan.pgRestarts, 'PostgreSQL restarts'],
    ] as const;
    for (const [done, planned, what] of short) if (done < planned) violation('harness', `only ${done} of ${planned} ${what} were injected`);
  } catch (error) {
    violation('harness', `the run failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  } finally {
    shuttingDown = true;
    await Promise.all(services.map((s) => s.stop().catch(() => {})));
    if (cluster.dir === undefined && !keep) {
      await withAdmin(cluster.adminUrl, (c) => c.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`)).catch((error) =>
        say(`could not drop ${dbName}: ${describeError(error)}`),
      );
    }
    if (keep) say(`kept: database ${dbName} on ${cluster.adminUrl}${cluster.dir === undefined ? '' : ` (cluster ${cluster.dir})`}`);
    cleanupSync();
    clearTimeout(watchdog);
  }

  process.stdout.write(`\n${summary(plan, seed, services, fuzzPassed)}\n`);
  process.stdout.write(`TORTURE_RESULT ${JSON.stringify({ variant: plan.variant, seed, ...Object.fromEntries(Object.entries(stats).filter(([, v]) => typeof v === 'number')), violations: violations.length })}\n`);
  // The service logs are for a post-mortem: kept only when there is one to do.
  if (violations.length === 0 && !keep) rmSync(logDir, { recursive: true, force: true });
  else say(`service logs: ${logDir}`);
  return violations.length === 0 ? 0 : 1;
}

if (flag('amqp')) {
  // Commands through RabbitMQ and events out through the outbox: a mode of its own module.
  await import('./torture-amqp.js');
} else {
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.on(signal, () => {
      say(`${signal}: stopping every process this run started`);
      cleanupSync();
      process.exit(130);
    });
  }
  process.on('exit', () => cleanupSync());

  main().then(
    (code) => process.exit(code),
    (error) => {
      console.error(error);
      cleanupSync();
      process.exit(1);
    },
  );
}
