/**
 * Idle resident memory of the embedded (PGlite) service: `node dist/server.js` with
 * DATABASE_URL=pglite:<a new temporary directory>, started, waited for until GET /health/ready answers
 * 200, left idle a few seconds, then VmRSS read from /proc/<pid>/status. Then the same on the
 * directory the first start created (an existing data directory). Each `--repeat` times; medians.
 *
 *   npm run bench:rss                                   # build, 3 starts each, 3 s idle
 *   npm run bench:rss -- --repeat 5 --idle 5 --no-build
 *   npm run bench:rss -- --entry /path/to/other/dist/server.js --service-env KEY=VALUE --node-arg=--some-v8-flag
 *
 * A figure, not a test: it prints the numbers and never fails on them.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { freePort, startNode, stopAll } from './lib/processes.js';
import { median } from './lib/stats.js';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..');

const { values } = parseArgs({
  options: {
    repeat: { type: 'string', default: '3' },
    idle: { type: 'string', default: '3' },
    entry: { type: 'string', default: join(repoRoot, 'dist/server.js') },
    'no-build': { type: 'boolean', default: false },
    'service-env': { type: 'string', multiple: true, default: [] },
    'node-arg': { type: 'string', multiple: true, default: [] },
  },
});

const repeat = Number(values.repeat);
const idleMs = Number(values.idle) * 1000;
if (!Number.isInteger(repeat) || repeat < 1 || repeat > 20) throw new Error('--repeat must be 1-20');
if (!(idleMs >= 0 && idleMs <= 60_000)) throw new Error('--idle must be 0-60 seconds');
const extraEnv = Object.fromEntries(
  values['service-env'].map((pair) => {
    const at = pair.indexOf('=');
    if (at < 1) throw new Error(`--service-env wants KEY=VALUE, got "${pair}"`);
    return [pair.slice(0, at), pair.slice(at + 1)];
  }),
);

/** VmRSS and its parts (kB in /proc, returned in MB). */
function memory(pid: number): { rss: number; anon: number; file: number; hwm: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN) / 1024;
  return { rss: field('VmRSS'), anon: field('RssAnon'), file: field('RssFile'), hwm: field('VmHWM') };
}

type Sample = ReturnType<typeof memory> & { readyMs: number };

async function measure(dataDir: string, logFile: string): Promise<Sample> {
  const port = await freePort();
  const started = Date.now();
  const service = await startNode(
    'service',
    [...values['node-arg'], values.entry],
    { LOG_LEVEL: 'warn', DATABASE_URL: `pglite:${dataDir}`, PORT: String(port), HOST: '127.0.0.1', ...extraEnv },
    { readyPath: '/health/ready', logFile, cwd: repoRoot, timeoutMs: 180_000 },
  );
  const readyMs = Date.now() - started;
  try {
    await new Promise((r) => setTimeout(r, idleMs));
    return { ...memory(service.pid), readyMs };
  } finally {
    await service.stop();
  }
}

const mb = (x: number) => x.toFixed(0);

function summary(label: string, samples: Sample[]): string {
  const pick = (key: keyof Sample) => samples.map((s) => s[key]);
  const rss = pick('rss');
  return (
    `| ${label} | ${mb(median(rss))} | ${mb(Math.min(...rss))}-${mb(Math.max(...rss))} | ${mb(median(pick('anon')))} | ` +
    `${mb(median(pick('file')))} | ${mb(median(pick('hwm')))} | ${(median(pick('readyMs')) / 1000).toFixed(1)} |`
  );
}

async function main(): Promise<void> {
  if (!values['no-build']) execFileSync('npm', ['run', 'build'], { cwd: repoRoot, stdio: 'inherit' });
  const work = mkdtempSync(join(tmpdir(), 'bench-rss-'));
  const logFile = join(work, 'service.log');
  const fresh: Sample[] = [];
  const existing: Sample[] = [];
  try {
    const dirs: string[] = [];
    for (let i = 0; i < repeat; i++) {
      const dir = join(work, `data-${i}`);
      dirs.push(dir);
      const sample = await measure(dir, logFile);
      fresh.push(sample);
      console.error(`new data directory #${i + 1}: VmRSS ${mb(sample.rss)} MB (peak ${mb(sample.hwm)} MB)`);
    }
    for (let i = 0; i < repeat; i++) {
      const sample = await measure(dirs[i]!, logFile);
      existing.push(sample);
      console.error(`existing data directory #${i + 1}: VmRSS ${mb(sample.rss)} MB (peak ${mb(sample.hwm)} MB)`);
    }
  } finally {
    await stopAll();
    rmSync(work, { recursive: true, force: true });
  }
  console.log(`\nIdle RSS of the embedded service (${values.entry}), ${values.idle} s after ready, ${repeat} starts each; MB:\n`);
  console.log('| data directory | VmRSS median | min-max | RssAnon | RssFile | VmHWM (peak) | ready after s |');
  console.log('|---|--:|--:|--:|--:|--:|--:|');
  console.log(summary('new', fresh));
  console.log(summary('existing', existing));
}

main().catch(async (error: unknown) => {
  await stopAll();
  console.error(error);
  process.exit(1);
});
