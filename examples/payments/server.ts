import { buildPaymentsApp } from './app.js';
import { openDatabase } from './database.js';
import { migrateToLatest } from './schema.js';

/**
 * Runs the payments receiver: on PostgreSQL or MariaDB/MySQL when DATABASE_URL is set (postgres://,
 * mysql:// or mariadb://), otherwise on embedded PGlite (in memory, or in PGLITE_DIR). PORT defaults to 3001.
 */
const lockTimeoutMs = 5000;
const { db, kind } = openDatabase(process.env.DATABASE_URL, {
  lockTimeoutMs,
  ...(process.env.PGLITE_DIR ? { pgliteDir: process.env.PGLITE_DIR } : {}),
});
await migrateToLatest(db);
const app = await buildPaymentsApp({
  db,
  lockTimeoutMs,
  // PGlite runs one transaction at a time: a second transaction slot would only wait for the first.
  ...(kind === 'pglite' ? { batch: { concurrency: 1 } } : {}),
  logger: { level: process.env.LOG_LEVEL ?? 'info' },
});
app.addHook('onClose', async () => db.destroy());
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => void app.close());
await app.listen({ port: Number(process.env.PORT ?? 3001), host: process.env.HOST ?? '127.0.0.1' });
app.log.info({ database: kind }, 'payments receiver ready');
