import { runInNewContext } from 'node:vm';
import { setV8Flag } from './v8-flags.js';

/**
 * Start-up (loading the modules, compiling the route schemas, opening and migrating the database)
 * allocates fast enough for V8 to grow its young generation to the maximum (64 MB in Node 24) and
 * leaves garbage in the old generation. An idle process keeps all of it: V8's memory reducer is started
 * by a full collection, and a service that only answers health checks allocates too little to cause one
 * (the embedded service's RSS was the same 3 s and 30 s after ready). One memory-reducing collection at
 * the end of start-up shrinks the young generation to its initial 1 MB and compacts the old one: about
 * 70 MB less resident (bench/README.md, "Idle RSS of the embedded default"). The young generation grows
 * again with the load, as it would from a fresh start.
 *
 * A memory-reducing collection also discards the baseline (Liftoff) code of WebAssembly functions, to be
 * compiled again when next called. For the embedded database, whose tier-up is off during start-up
 * (db/pglite.ts), that made V8 compile every function PostgreSQL ran next with its optimising compiler
 * at once: a 580 MB peak of compiler memory. So that code is kept.
 *
 * Node has no API for the collection without `--expose-gc`, which `node dist/server.js` cannot set on
 * itself; so the flag is set for the time it takes to create one context, whose `gc` is the collector's
 * entry point, and unset again (no other context gets a global `gc`).
 *
 * Each flag is set only where the running V8 has it (v8-flags.ts): Node 20's V8 has no
 * --flush-liftoff-code (nor that flushing), and a V8 whose flags cannot be listed gets no collection.
 */
export function releaseStartupMemory(): void {
  const gc = collector();
  if (gc === undefined) return;
  const keptLiftoff = setV8Flag('flush-liftoff-code', false);
  try {
    gc({ type: 'major', execution: 'sync', flavor: 'last-resort' });
  } finally {
    if (keptLiftoff) setV8Flag('flush-liftoff-code', true);
  }
}

function collector(): NodeJS.GCFunction | undefined {
  if (globalThis.gc !== undefined) return globalThis.gc;
  if (!setV8Flag('expose-gc', true)) return undefined;
  try {
    return runInNewContext('gc') as NodeJS.GCFunction;
  } finally {
    setV8Flag('expose-gc', false);
  }
}
