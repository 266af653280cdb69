/**
 * npm run bench [-- options]: the service under load, side by side with pgbench running the same SQL
 * and with a bare Fastify route (the HTTP ceiling). See bench/README.md.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import {
  drive,
  driveRequests,
  duplicatePool,
  Keys,
  mixedMessages,
  stockPuts,
  uniqueMessages,
  type Generator,
  type LoadResult,
} from './lib/load.js';
import {
  checkpoint,
  createBenchDatabase,
  ON_HAND,
  openCluster,
  runPgbench,
  seedBooks,
  analyzeAfterWarmUp,
  serverVersion,
  withClient,
  BOOKS,
  type Cluster,
  type PgbenchResult,
} from './lib/postgres.js';
import { amqpCell, type AmqpCellOptions } from './lib/amqp-cell.js';
import {
  checkMysqlInvariants,
  createMysqlBenchDatabase,
  DEFAULT_MYSQL_URL,
  mysqlServerPid,
  mysqlVersion,
  seedMysqlBooks,
  settleMysql,
  startMysqlPeer,
  sumReservedMysql,
} from './lib/mysql.js';
import { createMysqlPeersDatabase } from './lib/mysql-peers.js';
import { DEFAULT_AMQP_URL } from './lib/amqp.js';
import { createPeersDatabase, PEERS, startAmqpPeer, startPeer, startRedis, sumReserved, type Peer } from './lib/peers.js';
import {
  clusterCpuMs,
  cpuMs,
  currentRss,
  DatabaseBackendsCpu,
  freePort,
  openFilesLimit,
  RssWindow,
  startNode,
  stopAll,
  type BenchProcess,
} from './lib/processes.js';
import {
  renderReadme,
  type AmqpRecord,
  type CellRecord,
  type GrowthRecord,
  type OverloadRecord,
  type PeerCheck,
  type RunRecord,
} from './lib/report.js';
import { median } from './lib/stats.js';

const benchDir = dirname(fileURLToPath(import.meta.url));
const repoRoot = resolve(benchDir, '..');

export const SCENARIOS = ['unique', 'duplicates', 'hot', 'mixed', 'pglite', 'amqp'] as const;
export type Scenario = (typeof SCENARIOS)[number];

// ---------------------------------------------------------------------------------------------
// Options

const { values: flags } = parseArgs({
  options: {
    quick: { type: 'boolean', default: process.env.BENCH_QUICK === '1' },
    duration: { type: 'string', default: process.env.BENCH_DURATION },
    concurrency: { type: 'string', default: process.env.BENCH_CONCURRENCY },
    scenarios: { type: 'string', default: process.env.BENCH_SCENARIOS },
    'skip-growth': { type: 'boolean', default: process.env.BENCH_SKIP_GROWTH === '1' },
    'growth-rows': { type: 'string', default: process.env.BENCH_GROWTH_ROWS },
    'prune-rows': { type: 'string', default: process.env.BENCH_PRUNE_ROWS },
    repeat: { type: 'string', default: process.env.BENCH_REPEAT },
    'no-pgbench': { type: 'boolean', default: false },
    'no-ceiling': { type: 'boolean', default: false },
    'no-build': { type: 'boolean', default: false },
    'no-write': { type: 'boolean', default: false },
    peers: { type: 'boolean', default: true },
    'no-peers': { type: 'boolean', default: process.env.BENCH_PEERS === '0' },
    'no-overload': { type: 'boolean', default: false },
    'overload-connections': { type: 'string', default: process.env.BENCH_OVERLOAD_CONNECTIONS },
    'amqp-messages': { type: 'string', default: process.env.BENCH_AMQP_MESSAGES },
    database: { type: 'string', default: process.env.BENCH_DATABASE ?? 'postgres' },
    variant: { type: 'string', multiple: true, default: [] },
    'service-env': { type: 'string', multiple: true, default: [] },
    profile: { type: 'string' },
    help: { type: 'boolean', default: false },
  },
  allowPositionals: false,
});

if (flags.help) {
  console.log(readFileSync(join(benchDir, 'README.md'), 'utf8').split('<!-- bench:results:start -->')[0]);
  process.exit(0);
}

const quick = flags.quick;
const seconds = Number(flags.duration ?? (quick ? 3 : 10));
const concurrencies = (flags.concurrency ?? (quick ? '8,32' : '1,8,32,64')).split(',').map(Number);
const scenarios: Scenario[] = (flags.scenarios ?? SCENARIOS.join(','))
  .split(',')
  .map((s) => (/^\d$/.test(s) ? SCENARIOS[Number(s) - 1] : s) as Scenario);
const repeat = Number(flags.repeat ?? 1);
const growthRows = Number(flags['growth-rows'] ?? (quick ? 200_000 : 5_000_000));
const pruneRows = Number(flags['prune-rows'] ?? (quick ? 50_000 : 1_000_000));
const warmupSeconds = quick ? 1 : 3;
const overloadConnections = Number(flags['overload-connections'] ?? 1000);
/** The overload cell is short and bounded: a few seconds at the overload concurrency. */
const overloadSeconds = Math.min(seconds, quick ? 3 : 5);
for (const s of scenarios) if (!SCENARIOS.includes(s)) fail(`unknown scenario ${s}; use ${SCENARIOS.join(', ')} or 1-6`);
const amqpMessages = Number(flags['amqp-messages'] ?? (quick ? 2000 : 10_000));
if (!Number.isInteger(amqpMessages) || !(amqpMessages >= 1)) fail('bad --amqp-messages');
/** The service's default prefetch, and the peer's. */
const AMQP_PREFETCH = 32;
if (!(seconds > 0) || concurrencies.some((c) => !(c >= 1)) || !(repeat >= 1)) fail('bad --duration, --concurrency or --repeat');
if (!(overloadConnections >= 1)) fail('bad --overload-connections');
if (flags.database !== 'postgres' && flags.database !== 'mysql') fail('--database is postgres or mysql');

function fail(message: string): never {
  console.error(`bench: ${message}`);
  process.exit(2);
}

function envPairs(pairs: string[]): Record<string, string> {
  return Object.fromEntries(
    pairs.map((p) => {
      const i = p.indexOf('=');
      if (i < 1) fail(`expected KEY=VALUE, got ${p}`);
      return [p.slice(0, i), p.slice(i + 1)];
    }),
  );
}

interface Variant {
  name: string;
  /** The compiled server to start. */
  entry: string;
  env: Record<string, string>;
}

/** --variant NAME=ENTRY[,KEY=VALUE...]; ENTRY is a dist/server.js, or git:REF to build that commit. */
function parseVariant(spec: string): Variant {
  const [head, ...envs] = spec.split(',');
  const i = head!.indexOf('=');
  if (i < 1) fail(`--variant NAME=ENTRY[,KEY=VALUE...], got ${spec}`);
  return { name: head!.slice(0, i), entry: head!.slice(i + 1), env: envPairs(envs) };
}

// ---------------------------------------------------------------------------------------------
// Lifecycle: everything started is stopped, also on failure and on Ctrl-C.

const cleanups: (() => Promise<void>)[] = [];
let cleaning: Promise<void> | undefined;
async function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    await stopAll();
    for (const f of cleanups.reverse()) await f().catch((e: unknown) => console.error('cleanup:', e));
  })();
  return cleaning;
}
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    console.error(`bench: ${signal}, cleaning up`);
    void cleanup().finally(() => process.exit(130));
  });
}

function log(message: string): void {
  console.error(`[bench ${new Date().toISOString().slice(11, 19)}] ${message}`);
}

// ---------------------------------------------------------------------------------------------
// Building and starting servers

function build(): void {
  log('npm run build (the service runs compiled, as in production)');
  const r = spawnSync('npm', ['run', 'build'], { cwd: repoRoot, stdio: 'inherit' });
  if (r.status !== 0) throw new Error('npm run build failed');
}

/** Extracts a commit's tree into a temp dir and builds it there (for before/after comparisons). */
function buildRef(ref: string, workDir: string): string {
  const dir = join(workDir, `ref-${ref.replace(/[^A-Za-z0-9]/g, '_')}`);
  mkdirSync(dir, { recursive: true });
  execFileSync('bash', ['-c', `git -C "${repoRoot}" archive "${ref}" | tar -x -C "${dir}"`], { stdio: 'inherit' });
  symlinkSync(join(repoRoot, 'node_modules'), join(dir, 'node_modules'));
  log(`building ${ref} in ${dir}`);
  const r = spawnSync('npm', ['run', 'build'], { cwd: dir, stdio: 'inherit' });
  if (r.status !== 0) throw new Error(`building ${ref} failed`);
  return join(dir, 'dist/server.js');
}

const adminToken = randomBytes(16).toString('hex');

async function startService(
  name: string,
  entry: string,
  databaseUrl: string,
  workDir: string,
  env: Record<string, string> = {},
  onSpawn?: (pid: number) => void,
): Promise<BenchProcess> {
  const port = await freePort();
  const nodeArgs = flags.profile !== undefined ? ['--cpu-prof', `--cpu-prof-dir=${resolve(flags.profile)}`] : [];
  log(`starting ${name}: node ${[...nodeArgs, entry].join(' ')} on port ${port} ${JSON.stringify(env)}`);
  return startNode(
    name,
    [...nodeArgs, entry],
    { LOG_LEVEL: 'warn', DATABASE_URL: databaseUrl, PORT: String(port), HOST: '127.0.0.1', ADMIN_TOKEN: adminToken, ...env },
    { readyPath: '/health/ready', logFile: join(workDir, `${name}.log`), cwd: repoRoot, ...(onSpawn ? { onSpawn } : {}) },
  );
}

async function startCeiling(workDir: string): Promise<BenchProcess> {
  const port = await freePort();
  return startNode(
    'ceiling',
    ['--import', 'tsx', join(benchDir, 'ceiling.ts')],
    { PORT: String(port) },
    {
      readyPath: '/health/ready',
      logFile: join(workDir, 'ceiling.log'),
      cwd: repoRoot,
    },
  );
}

// ---------------------------------------------------------------------------------------------
// Cells

/** The postmaster of the throwaway cluster, for CPU accounting (undefined with BENCH_POSTGRES_URL). */
let postmasterPid: number | undefined;
/** Under --database mysql: the local MariaDB/MySQL server's process, whose CPU stands where PostgreSQL's does. */
let mysqlPid: number | undefined;

/** CPU milliseconds per answered message: the server, PostgreSQL and the load generator (this process). */
export interface CpuPerMessage {
  server: number;
  postgres: number | null;
  loadGenerator: number;
  /** The Powertools peer's Redis. */
  redis?: number;
}

function cpuCounters() {
  const self = process.cpuUsage();
  const database = postmasterPid !== undefined ? clusterCpuMs(postmasterPid) : mysqlPid !== undefined ? cpuMs(mysqlPid) : undefined;
  return { postgres: database, self: (self.user + self.system) / 1000 };
}

/** A server that died under load makes the run fail loudly, not report a cell of errors. */
function assertRunning(server: BenchProcess): void {
  const { exitCode, signalCode } = server.child;
  if (exitCode !== null || signalCode !== null)
    throw new Error(`${server.name} (pid ${server.pid}) exited (${exitCode ?? signalCode}) during the load:\n${server.tail()}`);
}

type Measured = LoadResult & { peakRssBytes: number; cpuMsPerMessage: CpuPerMessage; check?: PeerCheck; messagesPerTransaction?: number };

/**
 * The service's commits so far, from its own metrics: commands processed, and the transactions that
 * committed them (the group-commit batches of several, plus one for each command committed alone).
 * Undefined for a server without those metrics (the peers, the ceiling).
 */
async function commits(server: BenchProcess): Promise<{ processed: number; transactions: number } | undefined> {
  let text: string;
  try {
    const response = await fetch(`${server.baseUrl}/metrics`);
    if (!response.ok) return undefined;
    text = await response.text();
  } catch {
    return undefined;
  }
  const sum = (name: string, labels = '') => {
    let total = 0;
    let seen = false;
    for (const line of text.split('\n')) {
      if (!line.startsWith(`${name}{`) || !line.includes(labels)) continue;
      total += Number(line.slice(line.lastIndexOf(' ') + 1));
      seen = true;
    }
    return seen ? total : undefined;
  };
  const processed = sum('inbox_commands_total', 'result="processed"');
  const batches = sum('inbox_batch_size_count') ?? 0;
  const batched = sum('inbox_batch_size_sum') ?? 0;
  if (processed === undefined) return undefined;
  return { processed, transactions: batches + (processed - batched) };
}

async function measure(
  server: BenchProcess,
  generator: Generator,
  connections: number,
  cellSeconds = seconds,
  redisPid?: number,
): Promise<Measured> {
  const rss = new RssWindow(server.pid);
  const before = cpuCounters();
  const serverBefore = cpuMs(server.pid);
  const redisBefore = redisPid === undefined ? 0 : cpuMs(redisPid);
  const commitsBefore = await commits(server);
  const result = await drive(server.baseUrl, generator, { connections, seconds: cellSeconds });
  assertRunning(server);
  const after = cpuCounters();
  const commitsAfter = commitsBefore === undefined ? undefined : await commits(server);
  const transactions = commitsAfter === undefined ? 0 : commitsAfter.transactions - commitsBefore!.transactions;
  const n = Math.max(1, result.answered);
  const round = (x: number) => Math.round(x * 1000) / 1000;
  return {
    ...result,
    peakRssBytes: rss.end(),
    cpuMsPerMessage: {
      server: round((cpuMs(server.pid) - serverBefore) / n),
      postgres:
        before.postgres === undefined || server.name.includes('pglite') || server.name === 'ceiling'
          ? null
          : round((after.postgres! - before.postgres) / n),
      loadGenerator: round((after.self - before.self) / n),
      ...(redisPid === undefined ? {} : { redis: round((cpuMs(redisPid) - redisBefore) / n) }),
    },
    ...(transactions > 0 ? { messagesPerTransaction: round((commitsAfter!.processed - commitsBefore!.processed) / transactions) } : {}),
  };
}

const mb = (bytes: number) => Math.round((bytes / (1024 * 1024)) * 10) / 10;

function summarise(
  scenario: string,
  target: CellRecord['target'],
  concurrency: number,
  runs: (LoadResult & { peakRssBytes?: number; cpuMsPerMessage?: CpuPerMessage; check?: PeerCheck; messagesPerTransaction?: number })[],
  variant?: string,
): CellRecord {
  const perTransaction = runs.map((r) => r.messagesPerTransaction).filter((x): x is number => x !== undefined);
  return {
    scenario,
    target,
    concurrency,
    ...(variant === undefined ? {} : { variant }),
    messagesPerSec: median(runs.map((r) => r.messagesPerSec)),
    p50Ms: median(runs.map((r) => r.p50Ms)),
    p99Ms: median(runs.map((r) => r.p99Ms)),
    errors: runs.reduce((a, r) => a + r.errors, 0),
    peakRssMb: runs.some((r) => r.peakRssBytes !== undefined) ? mb(Math.max(...runs.map((r) => r.peakRssBytes ?? 0))) : null,
    cpuMsPerMessage: medianCpu(runs.map((r) => r.cpuMsPerMessage)),
    ...(perTransaction.length === 0 ? {} : { messagesPerTransaction: median(perTransaction) }),
    ok: runs.every((r) => r.ok),
    runs: runs.map((r) => ({
      messagesPerSec: Math.round(r.messagesPerSec * 10) / 10,
      p50Ms: r.p50Ms,
      p99Ms: r.p99Ms,
      answered: r.answered,
      statuses: r.statuses,
      ...(Object.keys(r.unexpected).length > 0 ? { unexpected: r.unexpected } : {}),
      ...(r.transportErrors > 0 ? { transportErrors: r.transportErrors, timeouts: r.timeouts } : {}),
      ...(r.doubleProcessed > 0 ? { doubleProcessed: r.doubleProcessed } : {}),
      ...(r.cpuMsPerMessage === undefined ? {} : { cpuMsPerMessage: r.cpuMsPerMessage }),
      ...(r.messagesPerTransaction === undefined ? {} : { messagesPerTransaction: r.messagesPerTransaction }),
      ...('check' in r && r.check !== undefined ? { exactlyOnce: r.check } : {}),
    })),
  };
}

function medianCpu(values: (CpuPerMessage | undefined)[]): CpuPerMessage | null {
  const present = values.filter((v): v is CpuPerMessage => v !== undefined);
  if (present.length === 0) return null;
  const pg = present.map((v) => v.postgres).filter((v): v is number => v !== null);
  const redis = present.map((v) => v.redis).filter((v): v is number => v !== undefined);
  return {
    server: median(present.map((v) => v.server)),
    postgres: pg.length === 0 ? null : median(pg),
    loadGenerator: median(present.map((v) => v.loadGenerator)),
    ...(redis.length === 0 ? {} : { redis: median(redis) }),
  };
}

function pgbenchCell(
  scenario: string,
  concurrency: number,
  runs: PgbenchResult[],
  target: 'pgbench' | 'pgbench-seed' = 'pgbench',
): CellRecord {
  return {
    scenario,
    target,
    concurrency,
    messagesPerSec: median(runs.map((r) => r.tps)),
    p50Ms: median(runs.map((r) => r.p50Ms)),
    p99Ms: median(runs.map((r) => r.p99Ms)),
    errors: runs.reduce((a, r) => a + r.failed + (r.ok ? 0 : 1), 0),
    peakRssMb: null,
    cpuMsPerMessage: medianCpu(runs.map((r) => r.cpuMsPerMessage)),
    ok: runs.every((r) => r.ok),
    runs: runs.map((r) => ({
      messagesPerSec: r.tps,
      p50Ms: r.p50Ms,
      p99Ms: r.p99Ms,
      answered: r.transactions,
      command: r.command,
      cpuMsPerMessage: r.cpuMsPerMessage,
      ...(r.error ? { error: r.error } : {}),
    })),
  };
}

function report(cell: CellRecord): CellRecord {
  const v = cell.variant === undefined ? '' : ` [${cell.variant}]`;
  log(
    `${cell.ok ? 'ok    ' : 'FAILED'} ${cell.scenario.padEnd(10)} ${cell.target.padEnd(12)}${v} c=${String(cell.concurrency).padEnd(3)} ` +
      `${cell.messagesPerSec.toFixed(0).padStart(6)}/s ` +
      // A drained cell (AMQP) has no per-request latency: its figure is a window.
      (Number.isFinite(cell.p50Ms) ? `p50 ${cell.p50Ms.toFixed(2)} ms p99 ${cell.p99Ms.toFixed(2)} ms ` : '') +
      `errors ${cell.errors}` +
      (cell.peakRssMb === null ? '' : ` rss ${cell.peakRssMb} MB`) +
      (cell.cpuMsPerMessage === null
        ? ''
        : ` cpu/msg ${cell.cpuMsPerMessage.server.toFixed(2)}+${cell.cpuMsPerMessage.postgres?.toFixed(2) ?? '?'}` +
          `${Number.isFinite(cell.cpuMsPerMessage.loadGenerator) ? `+${cell.cpuMsPerMessage.loadGenerator.toFixed(2)}` : ''}` +
          `${cell.cpuMsPerMessage.redis === undefined ? '' : ` (redis ${cell.cpuMsPerMessage.redis.toFixed(2)})`} ms`) +
      (cell.messagesPerTransaction === undefined ? '' : ` msgs/txn ${cell.messagesPerTransaction.toFixed(1)}`) +
      (cell.runs.length > 1 ? ` (runs: ${cell.runs.map((r) => Math.round(r.messagesPerSec)).join(', ')})` : ''),
  );
  return cell;
}

const pgbenchScript = join(benchDir, 'pgbench/order-placed.sql');
/** The hand-rolled peer's transaction, on the peers' tables. */
const pgbenchSeedScript = join(benchDir, 'pgbench/seed-transaction.sql');

async function pgbenchRuns(url: string, books: number, c: number, script = pgbenchScript): Promise<PgbenchResult[]> {
  const runs: PgbenchResult[] = [];
  for (let i = 0; i < repeat; i++) {
    await checkpoint(url);
    const pgBefore = postmasterPid === undefined ? undefined : clusterCpuMs(postmasterPid);
    const childrenBefore = cpuMs(process.pid, true) - cpuMs(process.pid);
    const r = await runPgbench(url, script, { clients: c, seconds, variables: { books } });
    const n = Math.max(1, r.transactions);
    const round = (x: number) => Math.round(x * 1000) / 1000;
    r.cpuMsPerMessage = {
      server: 0,
      postgres: pgBefore === undefined ? null : round((clusterCpuMs(postmasterPid!) - pgBefore) / n),
      // pgbench is a child of this process: its CPU shows in our reaped-children time once it exits.
      loadGenerator: round((cpuMs(process.pid, true) - cpuMs(process.pid) - childrenBefore) / n),
    };
    runs.push(r);
  }
  return runs;
}

async function serviceRuns(url: string, server: BenchProcess, make: () => Generator, c: number, times = repeat): Promise<Measured[]> {
  const runs: Measured[] = [];
  for (let i = 0; i < times; i++) {
    if (url !== '') await checkpoint(url);
    runs.push(await measure(server, make(), c));
  }
  return runs;
}

// ---------------------------------------------------------------------------------------------
// Peers: the same load against what a developer would build instead, beside each service cell.

interface PeerSet {
  /** The peers' database (their own stock_items and inbox). */
  url: string;
  /** sum(reserved) in the peers' database. */
  sumReserved(): Promise<number>;
  servers: Map<Peer, BenchProcess>;
  redisPid: number;
  idleRssMb: Record<Peer, number | null>;
}

async function startPeers(adminUrl: string, runTag: string, workDir: string, keys: Keys): Promise<PeerSet> {
  const database = await createPeersDatabase(adminUrl, `bench_peers_${runTag}`);
  cleanups.push(() => database.drop());
  const redis = await startRedis(workDir);
  cleanups.push(() => redis.stop());
  log(`peers: database bench_peers_${runTag} seeded with ${BOOKS} books; redis-server pid ${redis.pid} on ${redis.url}`);
  const servers = new Map<Peer, BenchProcess>();
  const idleRssMb = {} as Record<Peer, number | null>;
  for (const peer of PEERS) {
    const server = await startPeer(peer, benchDir, workDir, repoRoot, {
      databaseUrl: database.url,
      ...(peer === 'powertools' ? { redisUrl: redis.url } : {}),
    });
    servers.set(peer, server);
    const rss = currentRss(server.pid);
    idleRssMb[peer] = rss === undefined ? null : mb(rss);
    log(`peers: ${peer} on ${server.baseUrl} (pid ${server.pid}), idle RSS ${idleRssMb[peer]} MB`);
    await drive(server.baseUrl, uniqueMessages(keys, `${peer}-warm`), { connections: 8, seconds: warmupSeconds });
  }
  await analyzeAfterWarmUp(database.url);
  return { url: database.url, sumReserved: () => sumReserved(database.url), servers, redisPid: redis.pid, idleRssMb };
}

/**
 * One peer cell, then exactly once in the peers' database: for new messages sum(reserved) grew by the
 * 201 answers (plus at most the requests cut off when the cell ended, which the peer may have finished);
 * for duplicates nothing moved and nothing was answered 201.
 */
async function measurePeer(peers: PeerSet, peer: Peer, generator: Generator, c: number, expect: 'created' | 'replayed'): Promise<Measured> {
  const before = await peers.sumReserved();
  const r = await measure(peers.servers.get(peer)!, generator, c, seconds, peer === 'powertools' ? peers.redisPid : undefined);
  // Let requests cut off at the end of the cell finish before reading the figure.
  await new Promise((resolve) => setTimeout(resolve, 200));
  const reservedDelta = (await peers.sumReserved()) - before;
  const created = r.statuses['201'] ?? 0;
  const cutOff = Math.max(0, r.sent - Object.values(r.statuses).reduce((a, b) => a + b, 0));
  const ok = expect === 'created' ? reservedDelta >= created && reservedDelta <= created + cutOff : reservedDelta === 0 && created === 0;
  if (!ok) log(`${peer}: exactly-once check FAILED: sum(reserved) moved by ${reservedDelta}, ${created} answers 201, ${cutOff} cut off`);
  return { ...r, check: { reservedDelta, created, cutOff, ok }, ok: r.ok && ok, errors: r.errors + (ok ? 0 : 1) };
}

/** Rotates the order of service and peers from one round to the next, so drift hits all alike. */
let rotation = 0;

/** The service's cell and each peer's, same load, same duration, same repeat, in rotating order. */
async function sideBySide(
  url: string,
  service: BenchProcess,
  peers: PeerSet | undefined,
  scenario: Scenario,
  c: number,
  make: (target: 'service' | Peer) => Generator,
  expect: 'created' | 'replayed',
): Promise<CellRecord[]> {
  const targets: ('service' | Peer)[] = ['service', ...(peers === undefined ? [] : peers.servers.keys())];
  const runs = new Map<'service' | Peer, Measured[]>(targets.map((t) => [t, []]));
  for (let i = 0; i < repeat; i++) {
    const offset = rotation++;
    for (let k = 0; k < targets.length; k++) {
      const t = targets[(k + offset) % targets.length]!;
      if (flags.database === 'postgres') await checkpoint(url);
      runs.get(t)!.push(t === 'service' ? await measure(service, make(t), c) : await measurePeer(peers!, t, make(t), c, expect));
    }
  }
  return targets.map((t) => summarise(scenario, t, c, runs.get(t)!));
}

// ---------------------------------------------------------------------------------------------
// Overload: far more connections than the service can serve at once.

/** Waits (bounded) until no inbox row is in progress: requests cut off at the end of a cell finish. */
async function settle(url: string): Promise<void> {
  for (let i = 0; i < 150; i++) {
    const n = await withClient(url, async (c) =>
      Number((await c.query<{ n: string }>('SELECT count(*) AS n FROM inbox WHERE completed_at IS NULL')).rows[0]!.n),
    );
    if (n === 0) return;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

async function overloadCell(url: string, service: BenchProcess, keys: Keys, variant?: string): Promise<OverloadRecord> {
  const connections = overloadConnections;
  const fdLimits = { runner: openFilesLimit('self') ?? null, service: openFilesLimit(service.pid) ?? null };
  // Each connection is one descriptor in the runner and one in the service, beside their own files.
  const needed = connections + 200;
  const base = { connections, seconds: overloadSeconds, openFileLimits: fdLimits, ...(variant === undefined ? {} : { variant }) };
  const v = variant === undefined ? '' : ` [${variant}]`;
  if ((fdLimits.runner ?? Infinity) < needed || (fdLimits.service ?? Infinity) < needed) {
    const reason = `open-file limit ${JSON.stringify(fdLimits)} below ${needed}: raise it (ulimit -n) before npm run bench`;
    log(`overload: skipped, ${reason}`);
    return { ...base, skipped: reason, ok: true };
  }
  await checkpoint(url);
  log(`overload${v}: unique messages over ${connections} connections for ${overloadSeconds} s`);
  const r = await drive(service.baseUrl, uniqueMessages(keys, 'overload'), { connections, seconds: overloadSeconds, overload: true });
  assertRunning(service);
  await settle(url);
  const shedRecorded =
    r.shedIds.length === 0
      ? 0
      : await withClient(url, async (c) =>
          Number(
            (
              await c.query<{ n: string }>(
                `SELECT count(*) AS n FROM inbox WHERE consumer = 'inventory.reserve-stock' AND message_id = ANY($1::text[])`,
                [r.shedIds],
              )
            ).rows[0]!.n,
          ),
        );
  const record: OverloadRecord = {
    ...base,
    statuses: r.statuses,
    created: r.statuses['201'] ?? 0,
    shed: r.shed,
    errors: r.errors,
    transportErrors: r.transportErrors,
    timeouts: r.timeouts,
    createdPerSec: r.messagesPerSec,
    p50Ms: r.p50Ms,
    p99Ms: r.p99Ms,
    p99CreatedMs: r.p99CreatedMs,
    p99SteadyMs: r.p99SteadyMs,
    p99CreatedSteadyMs: r.p99CreatedSteadyMs,
    shedRecorded,
    ok: r.errors === 0 && shedRecorded === 0 && r.answered > 0,
  };
  log(
    `${record.ok ? 'ok    ' : 'FAILED'} overload${v} c=${connections}: ${JSON.stringify(r.statuses)}, shed ${r.shed} (recorded ${shedRecorded}), ` +
      `errors ${r.errors}, p99 ${r.p99Ms.toFixed(1)} ms (201s ${r.p99CreatedMs.toFixed(1)} ms); ` +
      `without each connection's first answer: p99 ${r.p99SteadyMs.toFixed(1)} ms (201s ${r.p99CreatedSteadyMs.toFixed(1)} ms)`,
  );
  return record;
}

// ---------------------------------------------------------------------------------------------
// Invariants: exactly once, checked in the database after the load.

async function checkInvariants(url: string): Promise<{ ok: boolean; detail: Record<string, number> }> {
  return withClient(url, async (c) => {
    const row = (
      await c.query<Record<string, string>>(`
        SELECT (SELECT count(*) FROM inbox WHERE consumer = 'inventory.reserve-stock') AS inbox_rows,
               (SELECT count(*) FROM inbox WHERE completed_at IS NULL) AS in_progress,
               (SELECT count(*) FROM stock_reservations) AS reservations,
               (SELECT coalesce(sum(reserved), 0) FROM stock_items) AS reserved,
               (SELECT count(*) FROM stock_reservations r WHERE NOT EXISTS
                  (SELECT 1 FROM inbox i WHERE i.message_id = r.reserved_by AND i.consumer = 'inventory.reserve-stock')) AS orphans`)
    ).rows[0]!;
    const d = Object.fromEntries(Object.entries(row).map(([k, v]) => [k, Number(v)]));
    const ok = d.in_progress === 0 && d.inbox_rows === d.reservations && d.reserved === d.reservations && d.orphans === 0;
    return { ok, detail: d };
  });
}

// ---------------------------------------------------------------------------------------------
// Growth: a big inbox, and pruning running alongside the load.

async function hasPruneRoute(server: BenchProcess): Promise<boolean> {
  try {
    const res = await fetch(`${server.baseUrl}/docs/json`);
    const doc = (await res.json()) as { paths?: Record<string, Record<string, unknown>> };
    return doc.paths?.['/inbox/prune']?.post !== undefined;
  } catch {
    return false;
  }
}

/** Deletes expired completed rows in batches, as a retention job would (used when the service has none). */
async function pruneBySql(url: string, retentionDays: number): Promise<number> {
  return withClient(url, async (c) => {
    let total = 0;
    for (;;) {
      const r = await c.query(
        `DELETE FROM inbox WHERE ctid IN (SELECT ctid FROM inbox WHERE completed_at < now() - make_interval(days => $1) LIMIT 10000)`,
        [retentionDays],
      );
      total += r.rowCount ?? 0;
      if ((r.rowCount ?? 0) === 0) return total;
    }
  });
}

async function growth(url: string, server: BenchProcess, keys: Keys): Promise<GrowthRecord> {
  const c = 32;
  log('growth: emptying the inbox for the 0-row baseline');
  await withClient(url, async (client) => {
    await client.query('TRUNCATE inbox, stock_reservations');
    await client.query('UPDATE stock_items SET reserved = 0');
    await client.query('VACUUM ANALYZE');
  });
  // Growth compares two states of one table, which cannot alternate: at least 3 runs each, medians.
  const growthRepeat = Math.max(3, repeat);
  const base = summarise('unique', 'service', c, await serviceRuns(url, server, () => uniqueMessages(keys, 'g0'), c, growthRepeat));
  report({ ...base, scenario: 'growth-0' });

  log(`growth: inserting ${growthRows} inbox rows (${pruneRows} of them expired) with one INSERT … SELECT generate_series`);
  const t0 = performance.now();
  await withClient(url, async (client) => {
    await client.query(
      `INSERT INTO inbox (message_id, consumer, key_source, fingerprint, received_at, completed_at, outcome, attempts, lease_until)
       SELECT 'old-' || g, 'inventory.reserve-stock', 'body', md5(g::text) || md5((g + 1)::text), t, t,
              '{"result": "reserved", "orderId": "00000000-0000-4000-8000-000000000000", "bookId": "00000000-0000-4000-8000-000000000001", "quantity": 1}'::jsonb,
              1, NULL
       FROM generate_series(1, $1::int) g,
            LATERAL (SELECT CASE WHEN g <= $2::int THEN now() - interval '30 days' - g * interval '1 ms'
                                 ELSE now() - (g % 1000000) * interval '1 second' END AS t) ts`,
      [growthRows, pruneRows],
    );
    await client.query('VACUUM ANALYZE inbox');
  });
  const insertSeconds = (performance.now() - t0) / 1000;
  log(`growth: inserted in ${insertSeconds.toFixed(0)} s`);
  const big = summarise('unique', 'service', c, await serviceRuns(url, server, () => uniqueMessages(keys, 'g5m'), c, growthRepeat));
  report({ ...big, scenario: `growth-${growthRows}` });

  // Pruning while the load runs.
  const viaRoute = await hasPruneRoute(server);
  await checkpoint(url);
  const pruneStarted = performance.now();
  let pruneSeconds: number | undefined;
  let pruned: number | undefined;
  let pruneError: string | undefined;
  const pruning = (async () => {
    try {
      if (viaRoute) {
        // One call prunes up to its batch bound and says whether it is complete: call until it is.
        pruned = 0;
        for (let call = 0; call < 1000; call++) {
          const res = await fetch(`${server.baseUrl}/inbox/prune`, {
            method: 'POST',
            headers: { authorization: `Bearer ${adminToken}` },
            signal: AbortSignal.timeout(600_000),
          });
          const text = await res.text();
          if (res.status >= 300) throw new Error(`POST /inbox/prune answered ${res.status}: ${text.slice(0, 300)}`);
          const body = JSON.parse(text) as { inbox?: number; complete?: boolean };
          pruned += body.inbox ?? 0;
          if (body.complete !== false) break;
        }
      } else {
        pruned = await pruneBySql(url, 14);
      }
    } catch (error) {
      pruneError = error instanceof Error ? error.message : String(error);
    } finally {
      pruneSeconds = (performance.now() - pruneStarted) / 1000;
    }
  })();
  const during = summarise('unique', 'service', c, [await measure(server, uniqueMessages(keys, 'gprune'), c)]);
  report({ ...during, scenario: 'prune' });
  await pruning;
  log(
    `growth: prune ${viaRoute ? 'via POST /inbox/prune' : 'via SQL (the service has no retention route)'} took ${pruneSeconds?.toFixed(1)} s${pruneError ? `, failed: ${pruneError}` : ''}`,
  );

  return {
    concurrency: c,
    rows: growthRows,
    insertSeconds,
    empty: base,
    full: big,
    throughputRatio: big.messagesPerSec / base.messagesPerSec,
    prune: {
      method: viaRoute ? 'POST /inbox/prune' : 'SQL batches of 10,000 (the service has no retention yet)',
      expiredRows: pruneRows,
      pruned: pruned ?? null,
      seconds: pruneSeconds ?? null,
      overlappedWholeCell: (pruneSeconds ?? 0) >= seconds,
      error: pruneError ?? null,
      during,
      p99Ratio: during.p99Ms / big.p99Ms,
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Machine description

function redisVersion(): string {
  try {
    return /v=(\S+)/.exec(execFileSync('redis-server', ['--version']).toString())?.[1] ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

function machine(postgresVersion: string) {
  const autocannonVersion = (
    JSON.parse(readFileSync(join(repoRoot, 'node_modules/autocannon/package.json'), 'utf8')) as { version: string }
  ).version;
  return {
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model ?? 'unknown',
    memoryGb: Math.round((totalmem() / 1024 ** 3) * 10) / 10,
    postgres: postgresVersion,
    node: process.version,
    loadGenerator: `autocannon ${autocannonVersion} (in the runner process, on the same 2 cores)`,
    kernel: execFileSync('uname', ['-sr']).toString().trim(),
  };
}

// ---------------------------------------------------------------------------------------------
// Main

/** The AMQP cell's settings and hooks: the service as the other cells start it, the peer, PostgreSQL's CPU. */
function amqpOptions(cluster: Cluster, runTag: string, workDir: string, keys: Keys, serviceEnv: Record<string, string>): AmqpCellOptions {
  const loopback = ['127.0.0.1', 'localhost', '[::1]'].includes(new URL(cluster.adminUrl).hostname);
  const pid = cluster.postmasterPid;
  return {
    adminUrl: cluster.adminUrl,
    runTag,
    keys,
    messages: amqpMessages,
    prefetch: AMQP_PREFETCH,
    repeat,
    amqpUrl: process.env.BENCH_AMQP_URL ?? DEFAULT_AMQP_URL,
    startService: (name, databaseUrl, env, onSpawn) =>
      startService(name, 'dist/server.js', databaseUrl, workDir, { ...serviceEnv, ...env }, onSpawn),
    startPeer: (env, onSpawn) => startAmqpPeer(benchDir, workDir, repoRoot, env, onSpawn),
    pgCpu: (database, exclude) => {
      if (pid !== undefined) return () => clusterCpuMs(pid);
      if (!loopback) return () => undefined;
      const backends = new DatabaseBackendsCpu(database, exclude);
      return () => backends.read();
    },
    pgCpuSource:
      pid !== undefined
        ? 'the whole throwaway cluster'
        : loopback
          ? "the backends serving the cell's database, by process title (BENCH_POSTGRES_URL: a shared cluster, its background processes not counted)"
          : 'not measured (BENCH_POSTGRES_URL is not on this machine)',
    onCleanup: (f) => cleanups.push(f),
    log,
  };
}

/** The HTTP cells (scenarios 1-5, the ceiling, the peers, overload, growth) on the run's database. */
async function httpCells(
  url: string,
  cluster: Cluster,
  runTag: string,
  workDir: string,
  keys: Keys,
  serviceEnv: Record<string, string>,
  cells: CellRecord[],
) {
  const service = await startService('service', 'dist/server.js', url, workDir, serviceEnv);
  await seedBooks(url);
  log(`seeded ${BOOKS} books`);
  // Idle: started, migrated, books seeded, before any load.
  await new Promise((resolve) => setTimeout(resolve, 1000));
  const idleRss = currentRss(service.pid);
  const idleRssMb: RunRecord['idleRssMb'] = { service: idleRss === undefined ? null : mb(idleRss), pglite: null };
  log(`service idle RSS: ${idleRssMb.service} MB`);

  const add = (cell: CellRecord) => cells.push(report(cell));

  log(`warming up the service (${warmupSeconds} s)`);
  await drive(service.baseUrl, uniqueMessages(keys, 'warm'), { connections: 8, seconds: warmupSeconds });
  await analyzeAfterWarmUp(url);

  if (!flags['no-ceiling']) {
    const ceiling = await startCeiling(workDir);
    await drive(ceiling.baseUrl, uniqueMessages(keys, 'cwarm'), { connections: 8, seconds: warmupSeconds });
    for (const c of concurrencies) {
      const runs = [];
      for (let i = 0; i < repeat; i++) runs.push(await measure(ceiling, uniqueMessages(keys, 'ceil'), c));
      add(summarise('any', 'ceiling', c, runs));
    }
    await ceiling.stop();
  }

  const withPeers = !flags['no-peers'] && scenarios.some((s) => s === 'unique' || s === 'duplicates' || s === 'hot');
  const peers = withPeers ? await startPeers(cluster.adminUrl, runTag, workDir, keys) : undefined;

  let pgliteRss: number | undefined;
  for (const scenario of scenarios) {
    if (scenario === 'unique' || scenario === 'hot') {
      const books = scenario === 'hot' ? 1 : BOOKS;
      for (const c of concurrencies) {
        for (const cell of await sideBySide(url, service, peers, scenario, c, () => uniqueMessages(keys, scenario, books), 'created'))
          add(cell);
        if (!flags['no-pgbench']) add(pgbenchCell(scenario, c, await pgbenchRuns(url, books, c)));
        if (!flags['no-pgbench'] && peers !== undefined)
          add(pgbenchCell(scenario, c, await pgbenchRuns(peers.url, books, c, pgbenchSeedScript), 'pgbench-seed'));
      }
    } else if (scenario === 'duplicates') {
      // Each target first processes its own 5,000 messages, then gets only copies of them.
      const pools = new Map<'service' | Peer, ReturnType<typeof duplicatePool>>();
      const targets: ['service' | Peer, BenchProcess][] = [['service', service], ...[...(peers?.servers ?? [])]];
      for (const [name, server] of targets) {
        const pool = duplicatePool(keys, 5000);
        pools.set(name, pool);
        const r = await drive(server.baseUrl, pool.seed, { connections: 16, amount: 5000 });
        if (!r.ok) throw new Error(`${name}: processing the duplicate pool failed: ${JSON.stringify(r.unexpected)}`);
      }
      for (const c of concurrencies) {
        for (const cell of await sideBySide(url, service, peers, scenario, c, (t) => pools.get(t)!.duplicates, 'replayed')) add(cell);
      }
    } else if (scenario === 'mixed') {
      for (const c of concurrencies)
        add(summarise(scenario, 'service', c, await serviceRuns(url, service, () => mixedMessages(keys, 'mix'), c)));
    } else if (scenario === 'pglite') {
      const dir = join(workDir, 'pglite');
      const embedded = await startService('service-pglite', 'dist/server.js', `pglite:${dir}`, workDir, serviceEnv);
      log('seeding PGlite through PUT /stock/{bookId}');
      await driveRequests(embedded.baseUrl, stockPuts(adminToken, ON_HAND), 8, BOOKS);
      await new Promise((resolve) => setTimeout(resolve, 1000));
      const embeddedIdle = currentRss(embedded.pid);
      idleRssMb.pglite = embeddedIdle === undefined ? null : mb(embeddedIdle);
      log(`PGlite service idle RSS (seeded, before load): ${idleRssMb.pglite} MB`);
      await drive(embedded.baseUrl, uniqueMessages(keys, 'pwarm'), { connections: 8, seconds: warmupSeconds });
      for (const c of concurrencies)
        add(summarise(scenario, 'service', c, await serviceRuns('', embedded, () => uniqueMessages(keys, 'pglite'), c)));
      pgliteRss = Math.max(...cells.filter((x) => x.scenario === 'pglite').map((x) => x.peakRssMb ?? 0));
      await embedded.stop();
    }
  }

  let overload: OverloadRecord | undefined;
  if (scenarios.includes('unique') && !flags['no-overload']) {
    overload = await overloadCell(url, service, keys);
    logGoodput(
      overload,
      cells.find((x) => x.scenario === 'unique' && x.target === 'service' && x.concurrency === Math.max(...concurrencies)),
    );
  }
  if (peers !== undefined) for (const server of peers.servers.values()) await server.stop();

  await settle(url);
  const invariants = await checkInvariants(url);
  log(`exactly-once invariants: ${invariants.ok ? 'hold' : 'BROKEN'} ${JSON.stringify(invariants.detail)}`);

  let growthRecord: GrowthRecord | undefined;
  if (!flags['skip-growth']) growthRecord = await growth(url, service, keys);
  await service.stop();
  return { idleRssMb, pgliteRss, overload, invariants, growthRecord, peersIdleRssMb: peers?.idleRssMb };
}

async function main(): Promise<number> {
  const started = new Date();
  const workDir = mkdtempSync(join(tmpdir(), 'bench-run.'));
  cleanups.push(async () => rmSync(workDir, { recursive: true, force: true }));
  const runTag = randomBytes(3).toString('hex');
  const keys = new Keys(runTag);
  const command = `npm run bench${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(' ')}` : ''}`;

  if (!flags['no-build']) build();
  const variants = (flags.variant ?? []).map(parseVariant);
  for (const v of variants) if (v.entry.startsWith('git:')) v.entry = buildRef(v.entry.slice(4), workDir);

  const cluster: Cluster = await openCluster(repoRoot, process.env.BENCH_POSTGRES_URL);
  cleanups.push(() => cluster.stop());
  postmasterPid = cluster.postmasterPid;
  log(`PostgreSQL: ${cluster.throwaway ? 'throwaway cluster (scripts/pg-throwaway.sh)' : 'BENCH_POSTGRES_URL'}`);
  const database = await createBenchDatabase(cluster.adminUrl, `bench_${runTag}`);
  cleanups.push(() => database.drop());
  const url = database.url;
  const postgresVersion = await serverVersion(url);

  if (variants.length > 0) return compareVariants(variants, url, workDir, keys, started, command, postgresVersion);

  const serviceEnv = envPairs(flags['service-env'] ?? []);
  const cells: CellRecord[] = [];
  const http = scenarios.some((s) => s !== 'amqp')
    ? await httpCells(url, cluster, runTag, workDir, keys, serviceEnv, cells)
    : {
        idleRssMb: { service: null, pglite: null },
        pgliteRss: undefined,
        overload: undefined,
        // No HTTP cell ran: the run's database was never migrated; the AMQP cell checks its own.
        invariants: { ok: true, detail: {} },
        growthRecord: undefined,
        peersIdleRssMb: undefined,
      };
  const { idleRssMb, pgliteRss, overload, invariants, growthRecord } = http;
  const peers = http.peersIdleRssMb === undefined ? undefined : { idleRssMb: http.peersIdleRssMb };
  let amqp: AmqpRecord | undefined;
  if (scenarios.includes('amqp')) {
    const result = await amqpCell(amqpOptions(cluster, runTag, workDir, keys, serviceEnv));
    amqp = result.record;
    for (const cell of result.cells) cells.push(report(cell));
    log(`amqp: service ÷ hand-rolled ${amqp.ratio.toFixed(2)}× (medians)`);
  }

  const record: RunRecord = {
    date: started.toISOString(),
    finished: new Date().toISOString(),
    command,
    machine: machine(postgresVersion),
    settings: {
      secondsPerCell: seconds,
      repeat,
      concurrencies,
      scenarios,
      books: BOOKS,
      service: `node dist/server.js (compiled with npm run build), LOG_LEVEL=warn${Object.keys(serviceEnv).length > 0 ? ` ${JSON.stringify(serviceEnv)}` : ''}`,
      postgres: cluster.throwaway
        ? 'throwaway cluster from scripts/pg-throwaway.sh (fsync=on, shared_buffers=256MB)'
        : 'BENCH_POSTGRES_URL',
      pgbench: 'bench/pgbench/order-placed.sql, -M prepared -j 2 (books=1 for the hot book)',
      ...(peers === undefined
        ? {}
        : {
            peers:
              'bench/peers/hand-rolled.ts and bench/peers/powertools-redis.ts (node --import tsx, pg pool of 10), on their own database in the same cluster; ' +
              `Powertools' Redis: redis-server ${redisVersion()} started by the runner (no RDB, no AOF)`,
            pgbenchSeed: "bench/pgbench/seed-transaction.sql on the peers' tables, -M prepared -j 2",
          }),
    },
    cells,
    invariants,
    ...(growthRecord === undefined ? {} : { growth: growthRecord }),
    pgliteRssMb: pgliteRss ?? null,
    idleRssMb: { ...idleRssMb, ...(peers === undefined ? {} : { peers: peers.idleRssMb }) },
    ...(overload === undefined ? {} : { overload }),
    ...(amqp === undefined ? {} : { amqp }),
    failed: cells.some((c) => !c.ok) || !invariants.ok || (overload !== undefined && !overload.ok) || (amqp !== undefined && !amqp.ok),
  };

  if (!flags['no-write']) {
    const day = started.toISOString().slice(0, 10);
    const out = join(benchDir, 'results', `${day}.json`);
    mkdirSync(dirname(out), { recursive: true });
    writeFileSync(out, JSON.stringify(record, null, 2) + '\n');
    const readmePath = join(benchDir, 'README.md');
    writeFileSync(readmePath, renderReadme(existsSync(readmePath) ? readFileSync(readmePath, 'utf8') : '', record, `results/${day}.json`));
    log(`wrote ${out} and bench/README.md`);
  }
  if (record.failed) log('RUN FAILED: unexpected statuses, errors or broken invariants (see above); its figures do not count');
  return record.failed ? 1 : 0;
}

/** The overload cell's 201s per second against the unique cell at the highest concurrency of the same run. */
function logGoodput(o: OverloadRecord, unique: CellRecord | undefined): void {
  if (o.skipped !== undefined || unique === undefined || unique.messagesPerSec === 0) return;
  const ratio = (o.createdPerSec ?? 0) / unique.messagesPerSec;
  log(
    `overload goodput: ${(o.createdPerSec ?? 0).toFixed(0)} msgs/s at ${o.connections} connections vs ${unique.messagesPerSec.toFixed(0)} ` +
      `at ${unique.concurrency} = ${ratio.toFixed(2)}×`,
  );
}

/**
 * Each variant's overload runs: 201s per second against its unique cell at the highest concurrency (the
 * goodput ratio), p99 of the 201s with and without each connection's first answer, 503s, errors.
 */
function printOverloads(variants: Variant[], cells: CellRecord[], overloads: OverloadRecord[]): void {
  if (overloads.length === 0) return;
  const top = Math.max(...concurrencies);
  console.log(`\noverload (${overloadConnections} connections): 201/s, ratio to unique c=${top}, p99 201s (steady), 503s, errors`);
  for (const v of variants) {
    const unique = cells.find((c) => c.scenario === 'unique' && c.concurrency === top && c.variant === v.name);
    for (const o of overloads.filter((x) => x.variant === v.name && x.skipped === undefined)) {
      const ratio = unique === undefined || unique.messagesPerSec === 0 ? NaN : (o.createdPerSec ?? 0) / unique.messagesPerSec;
      console.log(
        `${v.name.padEnd(14)} ${(o.createdPerSec ?? 0).toFixed(0).padStart(6)}/s  ${ratio.toFixed(2)}×  ` +
          `p99 ${(o.p99CreatedMs ?? 0).toFixed(0)} ms (${(o.p99CreatedSteadyMs ?? 0).toFixed(0)} ms)  503s ${o.shed ?? 0}  errors ${o.errors ?? 0}`,
      );
    }
  }
}

/** Before/after: the same cells against each variant, alternating, repeated; medians side by side. */
async function compareVariants(
  variants: Variant[],
  url: string,
  workDir: string,
  keys: Keys,
  started: Date,
  command: string,
  postgresVersion: string,
): Promise<number> {
  const servers = new Map<string, BenchProcess>();
  for (const v of variants) servers.set(v.name, await startService(`service-${v.name}`, v.entry, url, workDir, v.env));
  await seedBooks(url);
  for (const v of variants)
    await drive(servers.get(v.name)!.baseUrl, uniqueMessages(keys, 'warm'), { connections: 8, seconds: warmupSeconds });
  await analyzeAfterWarmUp(url);

  const cells: CellRecord[] = [];
  const overloads: OverloadRecord[] = [];
  for (const scenario of scenarios) {
    if (scenario === 'pglite') continue;
    let pool: ReturnType<typeof duplicatePool> | undefined;
    if (scenario === 'duplicates') {
      pool = duplicatePool(keys, 5000);
      await drive(servers.get(variants[0]!.name)!.baseUrl, pool.seed, { connections: 16, amount: 5000 });
      // The other variants answer every key of the pool once before the timed runs, so that each one's
      // duplicate cache holds what the seeding variant's does, and the cells compare like with like.
      for (const v of variants.slice(1)) await drive(servers.get(v.name)!.baseUrl, pool.replayAll, { connections: 16, amount: 5000 });
    }
    const make = (): Generator =>
      scenario === 'duplicates'
        ? pool!.duplicates
        : scenario === 'mixed'
          ? mixedMessages(keys, 'mix')
          : uniqueMessages(keys, scenario, scenario === 'hot' ? 1 : BOOKS);
    for (const c of concurrencies) {
      const runs = new Map<string, Measured[]>(variants.map((v) => [v.name, []]));
      for (let i = 0; i < repeat; i++) {
        // Rotate the order each round, so drift (autovacuum, checkpoints, neighbours) hits every variant alike.
        const order = variants.map((_, k) => variants[(k + i) % variants.length]!);
        for (const v of order) {
          await checkpoint(url);
          runs.get(v.name)!.push(await measure(servers.get(v.name)!, make(), c));
        }
      }
      for (const v of variants) cells.push(report(summarise(scenario, 'service', c, runs.get(v.name)!, v.name)));
    }
    if (scenario === 'unique' && !flags['no-overload']) {
      for (let i = 0; i < repeat; i++) {
        for (const v of variants.map((_, k) => variants[(k + i) % variants.length]!)) {
          overloads.push(await overloadCell(url, servers.get(v.name)!, keys, v.name));
        }
      }
    }
  }
  const invariants = await checkInvariants(url);
  log(`exactly-once invariants: ${invariants.ok ? 'hold' : 'BROKEN'} ${JSON.stringify(invariants.detail)}`);
  const record = {
    date: started.toISOString(),
    command,
    machine: machine(postgresVersion),
    settings: { secondsPerCell: seconds, repeat, concurrencies, scenarios },
    variants: variants.map((v) => ({ name: v.name, entry: v.entry.startsWith(workDir) ? '(built from git)' : v.entry, env: v.env })),
    cells,
    overloads,
    invariants,
  };
  console.log('\nscenario    c   ' + variants.map((v) => v.name.padStart(14)).join('') + '   (median msgs/s | p99 ms)');
  for (const scenario of scenarios) {
    for (const c of concurrencies) {
      const row = variants.map((v) => {
        const cell = cells.find((x) => x.scenario === scenario && x.concurrency === c && x.variant === v.name);
        return cell === undefined ? ''.padStart(14) : `${cell.messagesPerSec.toFixed(0)} | ${cell.p99Ms.toFixed(1)}`.padStart(14);
      });
      if (row.some((r) => r.trim() !== '')) console.log(`${scenario.padEnd(10)} ${String(c).padStart(3)}  ${row.join('')}`);
    }
  }
  if (!flags['no-write']) {
    const out = join(benchDir, 'results', `compare-${started.toISOString().slice(0, 19).replace(/[:T]/g, '-')}.json`);
    writeFileSync(out, JSON.stringify(record, null, 2) + '\n');
    log(`wrote ${out}`);
  }
  printOverloads(variants, cells, overloads);
  const failed = cells.some((c) => !c.ok) || !invariants.ok || overloads.some((o) => !o.ok);
  return failed ? 1 : 0;
}

// ---------------------------------------------------------------------------------------------
// --database mysql: the service and the hand-rolled mysql2 peer on MariaDB/MySQL.

/** What a MariaDB/MySQL run leaves out, and why; each is said once at the start. */
function mysqlSkips(): string[] {
  const skips = [
    'pgbench (it drives PostgreSQL only)',
    'the Powertools peer (its stock update runs on PostgreSQL)',
    'the overload cell and growth (their checks and bulk inserts are PostgreSQL SQL)',
    '--variant comparisons',
  ];
  for (const s of scenarios)
    if (s === 'pglite' || s === 'amqp')
      skips.push(`scenario ${s} (${s === 'pglite' ? 'the embedded engine' : 'its database is PostgreSQL'})`);
  return skips;
}

/** One table row per scenario and concurrency: the service and the peer side by side, medians of the repeats. */
function mysqlTable(cells: CellRecord[]): string {
  const cpu = (c: CellRecord | undefined) =>
    c?.cpuMsPerMessage ? `${c.cpuMsPerMessage.server.toFixed(2)} + ${c.cpuMsPerMessage.postgres?.toFixed(2) ?? '?'}` : '—';
  const lines = [
    '| scenario | c | service msgs/s | service p99 ms | service CPU ms/msg (node + server) | hand-rolled msgs/s | hand-rolled p99 ms | hand-rolled CPU ms/msg (node + server) | service ÷ hand-rolled |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const service of cells.filter((c) => c.target === 'service')) {
    const peer = cells.find((c) => c.target === 'hand-rolled' && c.scenario === service.scenario && c.concurrency === service.concurrency);
    const ratio = peer === undefined ? '—' : `${(service.messagesPerSec / peer.messagesPerSec).toFixed(2)}×`;
    lines.push(
      `| ${service.scenario} | ${service.concurrency} | ${service.messagesPerSec.toFixed(0)} | ${service.p99Ms.toFixed(1)} | ${cpu(service)} | ` +
        `${peer?.messagesPerSec.toFixed(0) ?? '—'} | ${peer?.p99Ms.toFixed(1) ?? '—'} | ${cpu(peer)} | ${ratio} |`,
    );
  }
  return lines.join('\n');
}

async function mysqlMain(): Promise<number> {
  const started = new Date();
  const workDir = mkdtempSync(join(tmpdir(), 'bench-run.'));
  cleanups.push(async () => rmSync(workDir, { recursive: true, force: true }));
  const runTag = randomBytes(3).toString('hex');
  const keys = new Keys(runTag);
  const command = `npm run bench -- ${process.argv.slice(2).join(' ')}`;
  for (const skip of mysqlSkips()) log(`--database mysql: skipping ${skip}`);
  if (!flags['no-build']) build();

  const adminUrl = process.env.BENCH_MYSQL_URL ?? DEFAULT_MYSQL_URL;
  mysqlPid = mysqlServerPid();
  const version = await mysqlVersion(adminUrl);
  log(`MariaDB/MySQL ${version} (BENCH_MYSQL_URL or ${DEFAULT_MYSQL_URL}); server pid ${mysqlPid ?? 'not visible: no server CPU'}`);
  const database = await createMysqlBenchDatabase(adminUrl, `bench_${runTag}`);
  cleanups.push(() => database.drop());
  const url = database.url;
  const serviceEnv = envPairs(flags['service-env'] ?? []);
  const service = await startService('service', 'dist/server.js', url, workDir, serviceEnv);
  await seedMysqlBooks(url);
  log(`seeded ${BOOKS} books`);
  await drive(service.baseUrl, uniqueMessages(keys, 'warm'), { connections: 8, seconds: warmupSeconds });

  const cells: CellRecord[] = [];
  const add = (cell: CellRecord) => cells.push(report(cell));
  if (!flags['no-ceiling']) {
    const ceiling = await startCeiling(workDir);
    for (const c of concurrencies)
      add(summarise('any', 'ceiling', c, await serviceRuns('', ceiling, () => uniqueMessages(keys, 'ceil'), c)));
    await ceiling.stop();
  }
  let peers: PeerSet | undefined;
  if (!flags['no-peers']) {
    const peerDb = await createMysqlPeersDatabase(adminUrl, `bench_peers_${runTag}`);
    cleanups.push(() => peerDb.drop());
    const peer = await startMysqlPeer(benchDir, workDir, repoRoot, peerDb.url);
    await drive(peer.baseUrl, uniqueMessages(keys, 'hand-rolled-warm'), { connections: 8, seconds: warmupSeconds });
    const rss = currentRss(peer.pid);
    peers = {
      url: peerDb.url,
      sumReserved: () => sumReservedMysql(peerDb.url),
      servers: new Map([['hand-rolled', peer]]),
      redisPid: -1,
      idleRssMb: { 'hand-rolled': rss === undefined ? null : mb(rss), powertools: null },
    };
    log(`peer: bench/peers/hand-rolled-mysql.ts on ${peer.baseUrl} (pid ${peer.pid}), database bench_peers_${runTag}`);
  }

  for (const scenario of scenarios) {
    if (scenario === 'unique' || scenario === 'hot') {
      const books = scenario === 'hot' ? 1 : BOOKS;
      for (const c of concurrencies)
        for (const cell of await sideBySide(url, service, peers, scenario, c, () => uniqueMessages(keys, scenario, books), 'created'))
          add(cell);
    } else if (scenario === 'duplicates') {
      const pools = new Map<'service' | Peer, ReturnType<typeof duplicatePool>>();
      for (const [name, server] of [['service', service] as const, ...(peers?.servers ?? [])]) {
        const pool = duplicatePool(keys, 5000);
        pools.set(name, pool);
        const r = await drive(server.baseUrl, pool.seed, { connections: 16, amount: 5000 });
        if (!r.ok) throw new Error(`${name}: processing the duplicate pool failed: ${JSON.stringify(r.unexpected)}`);
      }
      for (const c of concurrencies)
        for (const cell of await sideBySide(url, service, peers, scenario, c, (t) => pools.get(t)!.duplicates, 'replayed')) add(cell);
    } else if (scenario === 'mixed') {
      for (const c of concurrencies)
        add(summarise(scenario, 'service', c, await serviceRuns('', service, () => mixedMessages(keys, 'mix'), c)));
    }
  }
  if (peers !== undefined) for (const server of peers.servers.values()) await server.stop();
  await settleMysql(url);
  const invariants = await checkMysqlInvariants(url);
  log(`exactly-once invariants: ${invariants.ok ? 'hold' : 'BROKEN'} ${JSON.stringify(invariants.detail)}`);
  await service.stop();

  const load = loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');
  log(
    `medians of ${repeat} run(s), ${seconds} s per cell; load average at the end ${load}; CPU: node process + the ${version} server\n${mysqlTable(cells)}`,
  );
  const failed = cells.some((c) => !c.ok) || !invariants.ok;
  if (!flags['no-write']) {
    const out = join(benchDir, 'results', `${started.toISOString().slice(0, 10)}-mysql.json`);
    mkdirSync(dirname(out), { recursive: true });
    const record = { date: started.toISOString(), command, server: version, loadAverage: load, cells, invariants, failed };
    writeFileSync(out, JSON.stringify(record, null, 2) + '\n');
    log(`wrote ${out}`);
  }
  if (failed) log('RUN FAILED: unexpected statuses, errors or broken invariants (see above); its figures do not count');
  return failed ? 1 : 0;
}

let code: number;
try {
  code = flags.database === 'mysql' ? await mysqlMain() : await main();
} catch (error) {
  console.error('bench failed:', error);
  code = 1;
} finally {
  await cleanup();
}
process.exit(code);
