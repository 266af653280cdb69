import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { once } from 'node:events';
import { Worker } from 'node:worker_threads';
import { PGlite, type PGliteOptions } from '@electric-sql/pglite';
import { Kysely, PGliteDialect } from 'kysely';
import type { Database } from './database.js';

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

const options: PGliteOptions = { postgresqlconf: POSTGRESQL_CONF };

/**
 * Creating a data directory runs initdb in its own WebAssembly instance, whose memory the process keeps
 * (about 500 MB resident) long after. Run it in a worker thread instead: its memory goes with the worker.
 */
async function initializeInWorker(dataDir: string): Promise<void> {
  const worker = new Worker(
    `const { workerData, parentPort } = require('node:worker_threads');
     import(workerData.module)
       .then(async ({ PGlite }) => {
         const db = new PGlite(workerData.dataDir, workerData.options);
         await db.waitReady;
         await db.close();
       })
       .then(
         () => parentPort.postMessage({ ok: true }),
         (error) => parentPort.postMessage({ ok: false, error: String(error?.stack ?? error) }),
       );`,
    { eval: true, workerData: { module: import.meta.resolve('@electric-sql/pglite'), dataDir, options } },
  );
  const [message] = (await once(worker, 'message')) as [{ ok: boolean; error?: string }];
  await worker.terminate();
  if (!message.ok) throw new Error(`initializing the PGlite data directory ${dataDir} failed: ${message.error}`);
}

/** Opens `pglite:memory` or `pglite:<directory>` (created and initialised on first use). */
export async function openPglite(location: string): Promise<{ db: Kysely<Database>; close: () => Promise<void> }> {
  let dataDir: string | undefined;
  if (location !== 'memory' && location !== '') {
    mkdirSync(location, { recursive: true });
    dataDir = location;
    if (!existsSync(join(dataDir, 'PG_VERSION'))) await initializeInWorker(dataDir);
  }
  // PGlite is one connection: Kysely serialises every transaction on it, so there is no lock to wait for.
  const pglite = new PGlite(dataDir, options);
  const db = new Kysely<Database>({ dialect: new PGliteDialect({ pglite }) });
  return { db, close: () => db.destroy() };
}
