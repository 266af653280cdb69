/**
 * Cost per message, one request at a time, in figures that do not move with the machine's load: the
 * server's instructions (valgrind's callgrind), its socket system calls and those of its PostgreSQL
 * backends (strace -c), and, beside them, CPU time (utime + stime, which does move with the load).
 *
 *   npx tsx bench/per-message.ts --target service --entry dist/server.js --messages 2000 --warmup 500
 *   npx tsx bench/per-message.ts --target hand-rolled --messages 2000 --warmup 500 --mode strace
 *   npx tsx bench/per-message.ts --target service --mode callgrind --messages 100 --windows 3 --warmup 300
 *
 * Modes: `cpu` (default), `strace` (the server and the backends of its database attached after the
 * warm-up, detached after the messages), `callgrind` (the server runs under valgrind with
 * instrumentation off; it is switched on after the warm-up and the counts are dumped after the
 * messages; only the node process is counted). Every message is new (201), sent after the previous
 * answer, on one keep-alive connection. The database is a fresh one in the cluster of
 * BENCH_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/postgres), dropped at the end.
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { orderId, orderPlacedBody } from './lib/load.js';
import { createPeersDatabase } from './lib/peers.js';
import { BOOKS, createBenchDatabase, seedBooks, withClient } from './lib/postgres.js';
import { cpuMs, DatabaseBackendsCpu, freePort } from './lib/processes.js';

const benchDir = dirname(fileURLToPath(import.meta.url));
const repoRoot = resolve(benchDir, '..');

const { values: flags } = parseArgs({
  options: {
    target: { type: 'string', default: 'service' },
    entry: { type: 'string', default: 'dist/server.js' },
    messages: { type: 'string', default: '2000' },
    warmup: { type: 'string', default: '500' },
    mode: { type: 'string', default: 'cpu' },
    windows: { type: 'string', default: '3' },
  },
});
const target = flags.target;
if (target !== 'service' && target !== 'hand-rolled') throw new Error('--target service|hand-rolled');
const mode = flags.mode;
if (mode !== 'cpu' && mode !== 'strace' && mode !== 'callgrind') throw new Error('--mode cpu|strace|callgrind');
const messages = Number(flags.messages);
const warmup = Number(flags.warmup);
const adminUrl = process.env.BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const tag = Math.random().toString(16).slice(2, 8);
/** vgdb finds a valgrind'd process by a file named after the user and host in both processes' environments. */
const VGDB_NAMES = { LOGNAME: 'bench', USER: 'bench', HOSTNAME: 'bench' };
const work = mkdtempSync(join(tmpdir(), 'per-message-'));

const database =
  target === 'service' ? await createBenchDatabase(adminUrl, `bench_pm_${tag}`) : await createPeersDatabase(adminUrl, `bench_pm_${tag}`);
const databaseName = `bench_pm_${tag}`;
let child: ChildProcess | undefined;
try {
  const port = await freePort();
  const nodeArgs = target === 'service' ? [resolve(repoRoot, flags.entry)] : ['--import', 'tsx', join(benchDir, 'peers', 'hand-rolled.ts')];
  const wrapper =
    mode === 'callgrind'
      ? [
          'valgrind',
          '--tool=callgrind',
          '--instr-atstart=no',
          '--smc-check=all-non-file',
          '--dump-instr=no',
          `--callgrind-out-file=${join(work, 'callgrind.%p')}`,
        ]
      : [];
  const argv = [...wrapper, process.execPath, ...nodeArgs];
  child = spawn(argv[0]!, argv.slice(1), {
    cwd: repoRoot,
    env: {
      ...process.env,
      LOG_LEVEL: 'warn',
      DATABASE_URL: database.url,
      PORT: String(port),
      HOST: '127.0.0.1',
      ADMIN_TOKEN: 'per-message-admin-token-0123456789',
      PEER_POOL_MAX: '10',
      ...VGDB_NAMES,
    },
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  const pid = child.pid!;
  const base = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 600_000;
  for (;;) {
    if (Date.now() > deadline) throw new Error('not ready within 10 min');
    try {
      if ((await fetch(`${base}/health/ready`)).ok) break;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 500));
  }
  if (target === 'service') await seedBooks(database.url);

  let n = 0;
  const prefix = tag.padEnd(8, '0');
  const send = async (count: number) => {
    for (let i = 0; i < count; i++) {
      n++;
      const id = `pm-${tag}-${n}`;
      const response = await fetch(`${base}/inventory/order-placed`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: orderPlacedBody(id, orderId(prefix, n), 1 + (n % BOOKS)),
      });
      await response.arrayBuffer();
      if (response.status !== 201) throw new Error(`message ${n}: ${response.status}`);
    }
  };
  await send(warmup);
  await withClient(database.url, (c) => c.query('analyze'));

  const backends = (
    await withClient(adminUrl, (c) => c.query<{ pid: number }>('select pid from pg_stat_activity where datname = $1', [databaseName]))
  ).rows
    .map((r) => r.pid)
    .filter((p) => p !== undefined);
  const pgCpu = new DatabaseBackendsCpu(databaseName);
  // One strace for the server, one for its database's backends: socket system calls per message on each side.
  const straces: { name: string; process: ChildProcess; out: string }[] = [];
  if (mode === 'strace') {
    const sides: [string, number[]][] = [
      ['node', [pid]],
      ['postgres', backends],
    ];
    for (const [name, pids] of sides) {
      const process_ = spawn(
        'strace',
        ['-c', '-f', '-e', 'trace=%network,write,writev,read,readv', ...pids.flatMap((p) => ['-p', String(p)])],
        {
          stdio: ['ignore', 'ignore', 'pipe'],
        },
      );
      const entry = { name, process: process_, out: '' };
      process_.stderr.on('data', (d: Buffer) => (entry.out += d.toString()));
      straces.push(entry);
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
  if (mode === 'callgrind') {
    // Instrumentation was off since the start (nothing counted before this point).
    execFileSync('callgrind_control', ['-i', 'on', String(pid)], {
      stdio: ['ignore', 'inherit', 'inherit'],
      env: { ...process.env, ...VGDB_NAMES, HOST: '127.0.0.1' },
    });
  }
  // In callgrind mode the messages go in `windows` windows, each dumped on its own: windows that differ
  // much show the JIT still compiling (its threads count too), so figures are read from the later ones.
  const dump = async (): Promise<number> => {
    const before = new Set(readdirSync(work));
    execFileSync('callgrind_control', ['-d', String(pid)], {
      stdio: ['ignore', 'inherit', 'inherit'],
      env: { ...process.env, ...VGDB_NAMES, HOST: '127.0.0.1' },
    });
    for (let i = 0; i < 100 && readdirSync(work).every((f) => before.has(f)); i++) await new Promise((r) => setTimeout(r, 200));
    await new Promise((r) => setTimeout(r, 1000));
    let total = 0;
    // A dump's file is callgrind.<pid>.<n>; its "summary:" line holds the instructions since the last dump.
    for (const f of readdirSync(work).filter((f) => /^callgrind\.\d+\.\d+$/.test(f) && !before.has(f))) {
      for (const m of readFileSync(join(work, f), 'utf8').matchAll(/^summary: (\d+)/gm)) total += Number(m[1]);
    }
    return total;
  };
  const windows = mode === 'callgrind' ? Number(flags.windows) : 1;
  const perWindow: number[] = [];
  const cpu0 = cpuMs(pid);
  const pg0 = pgCpu.read();
  const t0 = performance.now();
  for (let w = 0; w < windows; w++) {
    await send(messages);
    if (mode === 'callgrind') perWindow.push(Math.round((await dump()) / messages));
  }
  const elapsed = performance.now() - t0;
  const cpu = cpuMs(pid) - cpu0;
  const pgMs = pgCpu.read() - pg0;
  const counted = messages * windows;
  const result: Record<string, unknown> = {
    target,
    entry: target === 'service' ? flags.entry : 'bench/peers/hand-rolled.ts',
    mode,
    messages: counted,
    warmup,
    backends: backends.length,
    loadAverage: readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' '),
    msPerMessage: +(elapsed / counted).toFixed(3),
    nodeCpuMsPerMessage: +(cpu / counted).toFixed(3),
    pgCpuMsPerMessage: +(pgMs / counted).toFixed(3),
  };
  if (mode === 'callgrind') result.instructionsPerMessage = perWindow;
  for (const strace of straces) {
    strace.process.kill('SIGINT');
    await new Promise((r) => strace.process.once('exit', r));
    const calls: Record<string, number> = {};
    for (const line of strace.out.split('\n')) {
      const m = /^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$/.exec(line);
      if (m && m[2] !== 'total') calls[m[2]!] = +(Number(m[1]) / messages).toFixed(2);
    }
    result[`${strace.name}SyscallsPerMessage`] = calls;
  }
  console.log(JSON.stringify(result));
} finally {
  child?.kill('SIGTERM');
  if (child !== undefined && child.exitCode === null) await new Promise((r) => setTimeout(r, 1500));
  if (child !== undefined && child.exitCode === null) child.kill('SIGKILL');
  await database.drop().catch(() => {});
  rmSync(work, { recursive: true, force: true });
}
