import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { percentile } from './stats.js';

const run = promisify(execFile);

export const BOOKS = 10_000;
/** Plenty, so no message in any scenario is refused for stock (a refusal takes another code path). */
export const ON_HAND = 1_000_000_000;

/** Book n (1-based) has a fixed uuid, so the load generator and pgbench address the same rows. */
export function bookId(n: number): string {
  return `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;
}
const BOOK_ID_SQL = (n: string) => `('00000000-0000-4000-8000-' || lpad(${n}::text, 12, '0'))::uuid`;

/** A PostgreSQL cluster for the run: the one in BENCH_POSTGRES_URL, or a throwaway one. */
export interface Cluster {
  readonly adminUrl: string;
  readonly throwaway: boolean;
  /** The postmaster's pid when the cluster runs here (throwaway), for CPU accounting. */
  readonly postmasterPid: number | undefined;
  stop(): Promise<void>;
}

export async function openCluster(repoRoot: string, givenUrl: string | undefined): Promise<Cluster> {
  if (givenUrl !== undefined && givenUrl !== '') {
    return { adminUrl: givenUrl, throwaway: false, postmasterPid: undefined, stop: async () => {} };
  }
  // mktemp under /tmp keeps the unix socket path short, as scripts/pg-throwaway.sh requires.
  const dir = mkdtempSync(join(tmpdir(), 'bench-pg.'));
  const script = join(repoRoot, 'scripts/pg-throwaway.sh');
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    await run('bash', [script, 'stop', dir]).catch((error: unknown) => console.error('stopping the throwaway cluster failed:', error));
  };
  try {
    const { stdout } = await run('bash', [script, 'start', dir], { maxBuffer: 1 << 20 });
    const postmasterPid = Number(readFileSync(join(dir, 'data/postmaster.pid'), 'utf8').split('\n')[0]);
    return { adminUrl: stdout.trim(), throwaway: true, postmasterPid, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** A fresh database in the cluster for this run; dropped by drop(). */
export async function createBenchDatabase(adminUrl: string, name: string): Promise<{ url: string; drop(): Promise<void> }> {
  await withClient(adminUrl, (c) => c.query(`CREATE DATABASE ${name}`));
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    drop: () => withClient(adminUrl, (c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)).then(() => undefined),
  };
}

export async function withClient<T>(url: string, f: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await f(client);
  } finally {
    await client.end();
  }
}

/** Seeds the books straight into stock_items (the schema comes from the service's own migrations). */
export async function seedBooks(url: string): Promise<void> {
  await withClient(url, async (c) => {
    await c.query(
      `INSERT INTO stock_items (book_id, title, on_hand, reserved, updated_at)
       SELECT ${BOOK_ID_SQL('g')}, 'Book ' || g, $1, 0, now() FROM generate_series(1, $2::int) g
       ON CONFLICT (book_id) DO UPDATE SET on_hand = excluded.on_hand`,
      [ON_HAND, BOOKS],
    );
    await c.query('VACUUM ANALYZE stock_items');
  });
}

/**
 * Analyzes a database after its warm-up, as autovacuum would within its naptime (a minute) once the
 * tables have grown. The cells measure that steady state: without it they would measure a new
 * database's first minute, whose prepared statements keep plans made while the tables were empty
 * (sequential scans of tables that have grown since; see bench/README.md).
 */
export async function analyzeAfterWarmUp(url: string): Promise<void> {
  await withClient(url, (c) => c.query('ANALYZE'));
}

export async function serverVersion(url: string): Promise<string> {
  return withClient(url, async (c) => (await c.query<{ v: string }>("SELECT current_setting('server_version') AS v")).rows[0]!.v);
}

export async function checkpoint(url: string): Promise<void> {
  await withClient(url, (c) => c.query('CHECKPOINT'));
}

/** The pgbench binary of the newest installed PostgreSQL, or the one on PATH. */
export function pgbenchPath(): string {
  const versions = existsSync('/usr/lib/postgresql') ? readdirSync('/usr/lib/postgresql').sort((a, b) => Number(b) - Number(a)) : [];
  for (const v of versions) {
    const candidate = `/usr/lib/postgresql/${v}/bin/pgbench`;
    if (existsSync(candidate)) return candidate;
  }
  return 'pgbench';
}

export interface PgbenchResult {
  tps: number;
  transactions: number;
  failed: number;
  p50Ms: number;
  p99Ms: number;
  ok: boolean;
  command: string;
  error?: string;
  /** Filled in by the runner: CPU ms per transaction (server 0: pgbench talks to PostgreSQL directly). */
  cpuMsPerMessage?: { server: number; postgres: number | null; loadGenerator: number };
}

/**
 * Runs a pgbench script (-M prepared) at a concurrency for a duration. Latency percentiles come from
 * the per-transaction log (-l), since pgbench itself prints only the mean.
 */
export async function runPgbench(
  url: string,
  script: string,
  options: { clients: number; seconds: number; variables: Record<string, string | number> },
): Promise<PgbenchResult> {
  const logDir = mkdtempSync(join(tmpdir(), 'bench-pgbench.'));
  const args = [
    '-n',
    '-M',
    'prepared',
    '-c',
    String(options.clients),
    '-j',
    String(Math.min(2, options.clients)),
    '-T',
    String(options.seconds),
    '-f',
    script,
    '-l',
    `--log-prefix=${join(logDir, 'tx')}`,
    ...Object.entries(options.variables).flatMap(([k, v]) => ['-D', `${k}=${v}`]),
    url,
  ];
  const command = `pgbench ${args.slice(0, -1).join(' ')} <url>`;
  try {
    const { code, stdout, stderr } = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const child = spawn(pgbenchPath(), args, { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      let err = '';
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      child.stderr.on('data', (d: Buffer) => (err += d.toString()));
      // A bound on top of -T, in case a client hangs.
      const timer = setTimeout(() => child.kill('SIGKILL'), (options.seconds + 60) * 1000);
      child.on('close', (c) => {
        clearTimeout(timer);
        resolve({ code: c, stdout: out, stderr: err });
      });
    });
    const tps = Number(/tps = ([\d.]+) \(without initial connection time\)/.exec(stdout)?.[1] ?? NaN);
    const transactions = Number(/number of transactions actually processed: (\d+)/.exec(stdout)?.[1] ?? 0);
    const failed = Number(/number of failed transactions: (\d+)/.exec(stdout)?.[1] ?? 0);
    const latencies: number[] = [];
    for (const file of readdirSync(logDir)) {
      for (const line of readFileSync(join(logDir, file), 'utf8').split('\n')) {
        // client_id transaction_no time script_no time_epoch time_us  (time in microseconds)
        const fields = line.split(' ');
        if (fields.length >= 3) latencies.push(Number(fields[2]) / 1000);
      }
    }
    latencies.sort((a, b) => a - b);
    const ok = code === 0 && Number.isFinite(tps) && failed === 0 && !/error/i.test(stderr);
    return {
      tps,
      transactions,
      failed,
      p50Ms: percentile(latencies, 50),
      p99Ms: percentile(latencies, 99),
      ok,
      command,
      ...(ok ? {} : { error: (stderr || stdout).slice(-2000) }),
    };
  } finally {
    rmSync(logDir, { recursive: true, force: true });
  }
}
