import { spawn } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { once } from 'node:events';
import { PGlite, type PGliteOptions } from '@electric-sql/pglite';
import { Kysely, PGliteDialect } from 'kysely';
import type { Database } from './database.js';
import { setV8Flag } from '../runtime/v8-flags.js';

/**
 * The embedded database: PostgreSQL compiled to WebAssembly, in this process. Loaded only when a
 * `pglite:` URL is used (create-database.ts imports this module on demand).
 */

/**
 * PGlite runs PostgreSQL's defaults (128 MB of shared buffers) inside the process's own memory. The
 * service's working set is small, and every buffer PostgreSQL touches stays resident: 32 MB keeps the
 * embedded service's idle footprint low without measurable cost (bench/README.md).
 */
const POSTGRESQL_CONF = ['shared_buffers=32MB', 'wal_buffers=1MB'];

/**
 * V8 compiles WebAssembly with its baseline compiler (Liftoff) first and recompiles each function that
 * has run long enough with its optimising one (TurboFan), keeping both copies. PostgreSQL's start-up
 * (recovery, catalogue loading, the migrations) runs enough of its 9 MB module to have large parts of it
 * optimised, 40-60 MB resident that requests may never use. So PostgreSQL is started and the service
 * migrated with tier-up off, and tier-up is switched back on when start-up is done
 * (DatabaseHandle.startupDone, at the latest on close). Both flags matter: the first is the dynamic
 * tier-up of hot functions, the second the eager one V8 falls back to without it. Left alone when the
 * process was started with a flag of its own about WebAssembly compilation.
 */
const ownWasmFlags = [...process.execArgv, ...(process.env.NODE_OPTIONS ?? '').split(/\s+/)].some((arg) =>
  /^--(no-)?(wasm|liftoff)/.test(arg),
);

function setWasmTierUp(on: boolean): void {
  if (ownWasmFlags) return;
  for (const flag of ['wasm-dynamic-tiering', 'wasm-tier-up']) setV8Flag(flag, on);
}

const options: PGliteOptions = { postgresqlconf: POSTGRESQL_CONF };

/**
 * Creating a data directory runs initdb in WebAssembly instances of its own, which grow to several hundred
 * MB; memory a process has once held it keeps (a worker thread's is not returned either: about 150 MB
 * stayed resident). So a new directory is initialised by a short-lived child process, and only the
 * finished directory is opened here.
 */
async function initializeInChildProcess(dataDir: string): Promise<void> {
  const script = `const [moduleUrl, dataDir, options] = process.argv.slice(1);
     const { PGlite } = await import(moduleUrl);
     const db = new PGlite(dataDir, JSON.parse(options));
     await db.waitReady;
     await db.close();`;
  // No inherited execArgv (a TypeScript loader, --inspect): the child runs PGlite's own JavaScript only.
  const child = spawn(
    process.execPath,
    ['--input-type=module', '-e', script, import.meta.resolve('@electric-sql/pglite'), dataDir, JSON.stringify(options)],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr = (stderr + chunk).slice(-4000)));
  const [code, signal] = (await once(child, 'close')) as [number | null, NodeJS.Signals | null];
  if (code !== 0) {
    throw new Error(`initializing the PGlite data directory ${dataDir} failed (${signal ?? `exit code ${code}`}): ${stderr.trim()}`);
  }
}

/** Opens `pglite:memory` or `pglite:<directory>` (created and initialised on first use). */
export async function openPglite(location: string): Promise<{ db: Kysely<Database>; startupDone: () => void; close: () => Promise<void> }> {
  let dataDir: string | undefined;
  if (location !== 'memory' && location !== '') {
    mkdirSync(location, { recursive: true });
    dataDir = location;
    if (!existsSync(join(dataDir, 'PG_VERSION'))) await initializeInChildProcess(dataDir);
  }
  setWasmTierUp(false);
  // PGlite is one connection: Kysely serialises every transaction on it, so there is no lock to wait for.
  const db = new Kysely<Database>({ dialect: new PGliteDialect({ pglite: new PGlite(dataDir, options) }) });
  return {
    db,
    startupDone: () => setWasmTierUp(true),
    close: async () => {
      setWasmTierUp(true);
      await db.destroy();
    },
  };
}
