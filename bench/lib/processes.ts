import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createWriteStream, readdirSync, readFileSync, writeFileSync } from 'node:fs';

/** A server the benchmark started in its own process (the service, or the HTTP ceiling). */
export interface BenchProcess {
  readonly name: string;
  readonly pid: number;
  readonly baseUrl: string;
  readonly child: ChildProcess;
  /** The last lines it wrote to stderr/stdout, for failure reports. */
  tail(): string;
  stop(): Promise<void>;
}

export { freePort } from '../../scripts/free-port.js';

const live = new Set<BenchProcess>();

export interface StartOptions {
  readyPath: string;
  logFile: string;
  cwd: string;
  timeoutMs?: number;
  /** Told the pid as soon as the process exists (before it is ready): for CPU sampled from its start. */
  onSpawn?: (pid: number) => void;
}

/** Stops every process still running (the runner's cleanup, also on failure). */
export async function stopAll(): Promise<void> {
  await Promise.all([...live].map((p) => p.stop()));
}

/**
 * Starts `node <args>` with env, waits until GET <readyPath> answers 200.
 * Output goes to logFile; the tail is kept for error messages.
 */
export async function startNode(name: string, args: string[], env: Record<string, string>, options: StartOptions): Promise<BenchProcess> {
  const port = Number(env.PORT);
  const child = spawn(process.execPath, args, {
    cwd: options.cwd,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  if (child.pid !== undefined) options.onSpawn?.(child.pid);
  const log = createWriteStream(options.logFile, { flags: 'a' });
  let tail = '';
  const keep = (chunk: Buffer) => {
    log.write(chunk);
    tail = (tail + chunk.toString()).slice(-4000);
  };
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  const exited = once(child, 'exit');
  const baseUrl = `http://127.0.0.1:${port}`;
  const proc: BenchProcess = {
    name,
    pid: child.pid!,
    baseUrl,
    child,
    tail: () => tail,
    async stop() {
      live.delete(proc);
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
        await exited;
        clearTimeout(timer);
      }
      log.end();
    },
  };
  live.add(proc);

  const deadline = Date.now() + (options.timeoutMs ?? 90_000);
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`${name} exited (${child.exitCode ?? child.signalCode}) before it was ready:\n${tail}`);
    }
    try {
      const res = await fetch(baseUrl + options.readyPath, { signal: AbortSignal.timeout(2000) });
      await res.arrayBuffer();
      if (res.status === 200) return proc;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  await proc.stop();
  throw new Error(`${name} was not ready within the timeout:\n${tail}`);
}

function statusField(pid: number, field: string): number | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const match = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status);
    return match?.[1] === undefined ? undefined : Number(match[1]) * 1024;
  } catch {
    return undefined;
  }
}

/**
 * Peak resident memory of a process over a window: VmHWM after resetting it (clear_refs 5) at the
 * window's start, and periodic VmRSS samples as a fallback where the reset is not allowed.
 */
export class RssWindow {
  private maxSampled = 0;
  private hwmReset = false;
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly pid: number) {
    try {
      writeFileSync(`/proc/${pid}/clear_refs`, '5');
      this.hwmReset = true;
    } catch {
      this.hwmReset = false;
    }
    this.sample();
    this.timer = setInterval(() => this.sample(), 100);
    this.timer.unref();
  }

  private sample(): void {
    const rss = statusField(this.pid, 'VmRSS');
    if (rss !== undefined && rss > this.maxSampled) this.maxSampled = rss;
  }

  /** Ends the window; the peak in bytes. */
  end(): number {
    clearInterval(this.timer);
    this.sample();
    const hwm = this.hwmReset ? statusField(this.pid, 'VmHWM') : undefined;
    return Math.max(this.maxSampled, hwm ?? 0);
  }
}

/** The process's peak RSS since it started (or since the last reset), in bytes. */
export function peakRss(pid: number): number | undefined {
  return statusField(pid, 'VmHWM');
}

/** The process's resident memory now (VmRSS), in bytes. */
export function currentRss(pid: number): number | undefined {
  return statusField(pid, 'VmRSS');
}

/** The soft limit on open files of a process (from /proc/<pid>/limits), or undefined. */
export function openFilesLimit(pid: number | 'self'): number | undefined {
  try {
    const match = /^Max open files\s+(\d+|unlimited)/m.exec(readFileSync(`/proc/${pid}/limits`, 'utf8'));
    return match === null ? undefined : match[1] === 'unlimited' ? Infinity : Number(match[1]);
  } catch {
    return undefined;
  }
}

const TICKS_PER_SECOND = 100;

function statFields(pid: number): string[] | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name may contain spaces: fields start after the closing parenthesis.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined;
  }
}

/** CPU time (user + system, ms) of a process; with `children`, also of its reaped children. */
export function cpuMs(pid: number, children = false): number {
  const f = statFields(pid);
  if (f === undefined) return 0;
  // After the name: state(0) ppid(1) … utime(11) stime(12) cutime(13) cstime(14).
  const ticks = Number(f[11]) + Number(f[12]) + (children ? Number(f[13]) + Number(f[14]) : 0);
  return (ticks * 1000) / TICKS_PER_SECOND;
}

/**
 * CPU time (ms) of a PostgreSQL cluster: the postmaster, its live children (backends, walwriter,
 * checkpointer…) and the children that have exited since (counted in the postmaster's cutime).
 */
export function clusterCpuMs(postmasterPid: number): number {
  let total = cpuMs(postmasterPid, true);
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const f = statFields(Number(entry));
    if (f !== undefined && Number(f[1]) === postmasterPid) total += cpuMs(Number(entry));
  }
  return total;
}

/**
 * CPU time (ms) of the PostgreSQL backends serving one database, found by their process title
 * ("postgres: [<cluster>: ]<user> <database> <client> <state>"), for a cluster the runner did not start (shared:
 * its other databases' backends and its background processes are left out). Each call adds up the
 * last reading of every backend seen so far, so one that exits keeps what it had used when last seen.
 */
export class DatabaseBackendsCpu {
  private readonly last = new Map<number, number>();

  constructor(
    private readonly database: string,
    /** Backends not to count (the runner's own polling connection). */
    private readonly exclude: ReadonlySet<number> = new Set(),
  ) {}

  read(): number {
    for (const entry of readdirSync('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      const pid = Number(entry);
      if (this.exclude.has(pid)) continue;
      let title: string;
      try {
        title = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      } catch {
        continue;
      }
      // With cluster_name set the title starts "postgres: 15/main: ".
      if (/^postgres: (?:[^\s:]+: )?\S+ (\S+) /.exec(title)?.[1] !== this.database) continue;
      const ms = cpuMs(pid);
      if (ms > 0 || !this.last.has(pid)) this.last.set(pid, ms);
    }
    let total = 0;
    for (const ms of this.last.values()) total += ms;
    return total;
  }
}
