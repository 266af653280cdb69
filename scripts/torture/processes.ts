/** Child processes and throwaway servers this run starts, and stopping all of them at the end, on failure or on Ctrl-C. */
import { execFile, spawn, spawnSync, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { violation } from './log.js';

const execFileAsync = promisify(execFile);

export const repoRoot = fileURLToPath(new URL('../..', import.meta.url));

const children = new Set<ChildProcess>();
const servers = new Set<ThrowawayServer>();
const cleanups: (() => void)[] = [];
let shuttingDown = false;

/** True once the run is ending: exits from then on are expected, and fault loops stop. */
export function isShuttingDown(): boolean {
  return shuttingDown;
}

export function beginShutdown(): void {
  shuttingDown = true;
}

/** Spawns a child with piped output that cleanupSync() kills if it is still running. */
export function spawnTracked(command: string, args: readonly string[], options: SpawnOptions): ChildProcess {
  const child = spawn(command, args, { ...options, stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(child);
  child.once('exit', () => children.delete(child));
  return child;
}

/** A throwaway PostgreSQL cluster (scripts/pg-throwaway.sh) or RabbitMQ node (scripts/rabbitmq-throwaway.sh). */
export class ThrowawayServer {
  readonly dir: string;
  private readonly script: string;

  /** Unless `keep`, cleanupSync() stops the server and deletes its directory. */
  constructor(script: 'pg-throwaway.sh' | 'rabbitmq-throwaway.sh', dirPrefix: string, keep: boolean) {
    this.script = join(repoRoot, 'scripts', script);
    this.dir = mkdtempSync(join(tmpdir(), dirPrefix));
    if (!keep) servers.add(this);
  }

  /** Starts the server and returns its URL. */
  async start(env?: Record<string, string>): Promise<string> {
    const options = { timeout: 120_000, ...(env === undefined ? {} : { env: { ...process.env, ...env } }) };
    const { stdout } = await execFileAsync(this.script, ['start', this.dir], options);
    return stdout.trim();
  }

  /** kill -9 of the node (RabbitMQ only); restart() starts it again. */
  async kill(): Promise<void> {
    await execFileAsync(this.script, ['kill', this.dir], { timeout: 30_000 });
  }

  /** rabbitmqctl against the node (RabbitMQ only); returns its output. */
  async ctl(...args: string[]): Promise<string> {
    const { stdout } = await execFileAsync(this.script, ['ctl', this.dir, ...args], { timeout: 120_000 });
    return stdout;
  }

  /** Stops the server and starts it again on the same port, its data kept. */
  async restart(): Promise<void> {
    await execFileAsync(this.script, ['restart', this.dir], { timeout: 120_000 });
  }

  stopSync(): void {
    spawnSync(this.script, ['stop', this.dir], { stdio: 'ignore', timeout: 90_000 });
  }
}

/** Registers a synchronous stop for what a run started outside spawnTracked and ThrowawayServer; run once by cleanupSync(). */
export function onCleanup(stop: () => void): void {
  cleanups.push(stop);
}

/** Kills every child still running and stops every throwaway server not kept; safe to call more than once. */
export function cleanupSync(): void {
  shuttingDown = true;
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  for (const stop of cleanups.splice(0)) stop();
  for (const server of servers) server.stopSync();
  servers.clear();
}

/** Ends a run that exceeds its hard limit: a violation, the report, everything stopped, exit 1. */
export function startWatchdog(limitMs: number, report: () => void): NodeJS.Timeout {
  const timer = setTimeout(() => {
    violation('harness', `the run exceeded its hard limit of ${limitMs / 1000} s`);
    report();
    cleanupSync();
    process.exit(1);
  }, limitMs);
  timer.unref();
  return timer;
}
