/** Service processes (src/server.ts) on 127.0.0.1: start until live, kill -9, stop; their output kept for post-mortems. */
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createWriteStream, type WriteStream } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describeError } from './log.js';
import { isShuttingDown, repoRoot, spawnTracked } from './processes.js';

export const ADMIN_TOKEN = `torture-${randomBytes(12).toString('hex')}`;

/** This process's environment minus variables with the given prefixes, plus loopback, the admin token and `settings`. */
export function serviceEnvironment(dropPrefixes: readonly string[], settings: Record<string, string>): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !dropPrefixes.some((p) => k.startsWith(p))) env[k] = v;
  return Object.assign(env, settings, { HOST: '127.0.0.1', ADMIN_TOKEN, LOG_LEVEL: 'warn' });
}

export interface ServiceExit {
  pid: number | undefined;
  code: number | null;
  signal: NodeJS.Signals | null;
  /** The process had answered /health/live; otherwise it ended during its start. */
  wasUp: boolean;
}

/** How a mode starts, stops and watches its service processes. */
export interface ServicePolicy {
  startAttempts: number;
  /** How long stop() waits after SIGTERM before SIGKILL. */
  stopGraceMs: number;
  /** A log file per service with all its output goes here; without it only the last lines are kept. */
  logDir?: string;
  /** After a failed start attempt: records it and returns how long to wait before the next attempt. */
  failedStart(service: Service, attempt: number): number;
  /** The current process exited without this run killing or stopping it. */
  exited(service: Service, exit: ServiceExit): void;
}

const TAIL_LINES = 200;
const TAIL_WIDTH = 600;

export class Service {
  child: ChildProcess | undefined;
  up = false;
  /** Set while this run kills or restarts the process, so its exit is not taken for a crash. */
  expectingExit = false;
  /** The last lines the process printed. */
  readonly tail: string[] = [];
  /** Error-level log entries (level >= 50), counted by message and error. */
  readonly errorLogs = new Map<string, number>();
  private readonly log: WriteStream | undefined;

  constructor(
    readonly index: number,
    readonly port: number,
    private readonly env: Record<string, string>,
    private readonly policy: ServicePolicy,
  ) {
    if (policy.logDir !== undefined) {
      this.log = createWriteStream(join(policy.logDir, `service-${index}.log`), { flags: 'a' });
      // Output may still drain after the log is closed at the end; losing that is fine, crashing is not.
      this.log.on('error', () => {});
    }
  }

  get baseUrl(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** Spawns the process and waits until it answers /health/live; retries a start that fails (e.g. while a server restarts). */
  async start(deadline = Number.POSITIVE_INFINITY): Promise<void> {
    for (let attempt = 1; attempt <= this.policy.startAttempts && Date.now() < deadline; attempt++) {
      const child = this.spawn();
      if (await this.waitLive(child, Math.min(deadline, Date.now() + 60_000))) {
        this.up = true;
        return;
      }
      const waitMs = this.policy.failedStart(this, attempt);
      this.expectingExit = true;
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGKILL');
        await new Promise((resolve) => child.once('exit', resolve));
      }
      this.expectingExit = false;
      await sleep(waitMs);
    }
    throw new Error(`service ${this.index} did not start: ${this.tail.slice(-5).join(' | ')}`);
  }

  private spawn(): ChildProcess {
    const child = spawnTracked(process.execPath, ['--import', 'tsx', 'src/server.ts'], {
      cwd: repoRoot,
      env: { ...this.env, PORT: String(this.port) },
    });
    this.child = child;
    child.on('error', (error) => this.keep(`spawn error: ${describeError(error)}`));
    this.log?.write(`\n--- ${new Date().toISOString()} start pid ${child.pid}\n`);
    for (const stream of [child.stdout, child.stderr]) {
      let pending = '';
      stream?.on('data', (chunk: Buffer) => {
        this.log?.write(chunk);
        pending += chunk.toString();
        const lines = pending.split('\n');
        pending = lines.pop() ?? '';
        for (const line of lines) this.observe(line);
      });
    }
    child.once('exit', (code, signal) => {
      this.log?.write(`--- ${new Date().toISOString()} exit code ${code} signal ${signal}\n`);
      if (this.child !== child) return;
      const wasUp = this.up;
      this.up = false;
      if (!this.expectingExit && !isShuttingDown()) this.policy.exited(this, { pid: child.pid, code, signal, wasUp });
    });
    return child;
  }

  private keep(line: string): void {
    this.tail.push(line.slice(0, TAIL_WIDTH));
    if (this.tail.length > TAIL_LINES) this.tail.shift();
  }

  private observe(line: string): void {
    if (line.trim() === '') return;
    this.keep(line);
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

  /** SIGTERM, then SIGKILL after the grace period; closes the log once the output has been written. */
  async stop(): Promise<void> {
    this.expectingExit = true;
    const child = this.child;
    if (child !== undefined && child.exitCode === null && child.signalCode === null) {
      // 'close', not 'exit': the process's output has been written to the log by then.
      const closed = new Promise((resolve) => child.once('close', resolve));
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), this.policy.stopGraceMs);
      await closed;
      clearTimeout(timer);
    }
    const log = this.log;
    if (log !== undefined) await new Promise((resolve) => log.end(resolve));
  }
}
