import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import type { CommandAnswer, Problem } from './fixtures.js';

const seamServer = fileURLToPath(new URL('./seam-server.ts', import.meta.url));

export interface ServerProcess {
  readonly child: ChildProcess;
  readonly baseUrl: string;
  /** What the process wrote to stderr so far (its logs). */
  logs(): string;
  /** With SEAM_HOLD=until-released: resolves once the command with this key holds its transaction open. */
  held(messageId: string, timeoutMs?: number): Promise<void>;
  /** With SEAM_HOLD=until-released: lets every held transaction go on to commit (or SEAM_FAIL). */
  release(): void;
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** Starts the service in its own process on a free loopback port; resolves once it listens. */
export async function startServer(env: Record<string, string>, timeoutMs = 90_000): Promise<ServerProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', seamServer], {
    env: { ...process.env, LOG_LEVEL: 'warn', ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  // A test may release a process that has already exited: a write to its closed stdin is not an error here.
  child.stdin.on('error', () => {});
  let stderr = '';
  let stdout = '';
  child.stdout.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  child.stderr.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const port = await new Promise<string>((resolve, reject) => {
    // A process that never said it listens is stopped: left running, it would keep the test file from ending.
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`server did not start in ${timeoutMs} ms:\n${stderr}`));
    }, timeoutMs);
    child.stdout.on('data', () => {
      const match = /LISTENING (\d+)/.exec(stdout);
      if (match?.[1]) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code} before listening:\n${stderr}`));
    });
  });
  return {
    child,
    baseUrl: `http://127.0.0.1:${port}`,
    logs: () => stderr,
    async held(messageId, waitMs = 20_000) {
      const line = `HELD ${messageId}\n`;
      const deadline = performance.now() + waitMs;
      while (!stdout.includes(line)) {
        if (child.exitCode !== null) throw new Error(`server exited before holding ${messageId}:\n${stderr}`);
        if (performance.now() > deadline) throw new Error(`${messageId} was not held within ${waitMs} ms:\n${stderr}`);
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    },
    release() {
      child.stdin.write('RELEASE\n');
    },
    async stop(signal = 'SIGTERM') {
      if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
      const exited = once(child, 'exit');
      child.kill(signal);
      const kill = setTimeout(() => child.kill('SIGKILL'), 15_000);
      const [code] = (await exited) as [number | null];
      clearTimeout(kill);
      return code;
    },
  };
}

/**
 * A command route's answer, read without knowing which it is: a 2xx has an outcome, a problem
 * (4xx, 5xx) a type. (Both have a `status`, of different types, so it is left out.)
 */
export type CommandReply = Partial<Omit<CommandAnswer, 'status'> & Omit<Problem, 'status'>>;

/** POSTs a command's JSON over a real socket and measures how long the answer took. */
export async function postJson(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: CommandReply | undefined; headers: Headers; ms: number }> {
  const started = performance.now();
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(30_000),
  });
  const text = await res.text();
  return {
    status: res.status,
    body: text === '' ? undefined : (JSON.parse(text) as CommandReply),
    headers: res.headers,
    ms: performance.now() - started,
  };
}

/** Creates a book through a running service's admin API, as an operator would; returns its id. */
export async function seedBookOverHttp(baseUrl: string, adminToken: string, onHand: number): Promise<string> {
  const bookId = randomUUID();
  const res = await fetch(`${baseUrl}/stock/${bookId}`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${adminToken}` },
    body: JSON.stringify({ title: 'Dune', onHand }),
    signal: AbortSignal.timeout(30_000),
  });
  if (res.status !== 201) throw new Error(`seeding failed: ${res.status} ${await res.text()}`);
  return bookId;
}

/**
 * Seam servers on one test database, each with the admin token and no background pruning. `started`
 * lists every server started, for the suite's after hook to stop.
 */
export function seamServers(databaseUrl: () => string, adminToken: string) {
  const started: ServerProcess[] = [];
  return {
    started,
    start: async (env: Record<string, string> = {}): Promise<ServerProcess> => {
      const server = await startServer({ DATABASE_URL: databaseUrl(), ADMIN_TOKEN: adminToken, INBOX_PRUNE_INTERVAL_MS: '0', ...env });
      started.push(server);
      return server;
    },
    seed: (server: ServerProcess, onHand: number) => seedBookOverHttp(server.baseUrl, adminToken, onHand),
  };
}
