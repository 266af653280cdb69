/**
 * The inbox's hot path alone, in this process: order-placed commands submitted straight to the command
 * runner (no HTTP, no broker) in waves, as a broker's prefetch hands them over, against a fresh database
 * on a PostgreSQL server. Reports CPU per new message of this process and of the database's backends,
 * statements per message (pg_stat_database's transactions are not enough: the counter is the driver's),
 * and messages per transaction. CPU time, unlike throughput, barely moves with what else the machine
 * runs; each figure is the median of the rounds, which follow a warm-up round and an ANALYZE. Last, the inbox's updates over the whole run and how
 * many were HOT (pg_stat_user_tables, read once the service's connections have closed and flushed their
 * counters): a completion that is not HOT writes a new entry in every index of the inbox.
 *
 *   npx tsx bench/hot-path.ts [--messages 4000] [--wave 32] [--rounds 5]
 *   BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres (the default)
 */
import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { buildApp } from '../src/app.js';
import { orderPlacedCommand } from '../src/inventory/order.commands.js';
import { DatabaseBackendsCpu } from './lib/processes.js';
import { bookId, createBenchDatabase, seedBooks, BOOKS } from './lib/postgres.js';
import { median } from './lib/stats.js';

const { values: flags } = parseArgs({
  options: {
    messages: { type: 'string', default: '4000' },
    wave: { type: 'string', default: '32' },
    rounds: { type: 'string', default: '5' },
    /** SQL run on the bench database after the migrations, before the rounds (to try a schema change). */
    sql: { type: 'string', multiple: true, default: [] },
  },
});
const messages = Number(flags.messages);
const wave = Number(flags.wave);
const rounds = Number(flags.rounds);
const adminUrl = process.env.BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

const database = await createBenchDatabase(adminUrl, `bench_hot_${randomUUID().slice(0, 8)}`);
const queries = { count: 0, counting: true };
// Counts the statements the service sends: every Client.query call, BEGIN and COMMIT included.
const prototype = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
const originalQuery = prototype.query;
prototype.query = function (this: pg.Client, ...args: unknown[]) {
  if (queries.counting) queries.count++;
  return originalQuery.apply(this, args);
};

const app = await buildApp({ logger: false, config: { databaseUrl: database.url, amqpUrl: undefined } });
await app.ready();
await seedBooks(database.url);
for (const text of flags.sql) await withCount(text);
const dbName = new URL(database.url).pathname.slice(1);
const backends = new DatabaseBackendsCpu(dbName, new Set());

function order(n: number) {
  return { orderId: randomUUID(), bookId: bookId(1 + (n % BOOKS)), quantity: 1 };
}

async function round(tag: string): Promise<{ node: number; pg: number; statements: number; perTransaction: number }> {
  const pgBefore = backends.read() ?? 0;
  const queriesBefore = queries.count;
  const cpuBefore = process.cpuUsage();
  for (let sent = 0; sent < messages; sent += wave) {
    const batch = [];
    for (let i = sent; i < Math.min(messages, sent + wave); i++) {
      batch.push(app.commands.execute(orderPlacedCommand, { messageId: `${tag}-${i}`, source: 'body' }, order(i)));
    }
    await Promise.all(batch);
  }
  const cpu = process.cpuUsage(cpuBefore);
  const pgAfter = backends.read() ?? 0;
  const transactions = await withCount(`SELECT count(DISTINCT received_at) AS n FROM inbox WHERE message_id LIKE '${tag}-%'`);
  return {
    node: (cpu.user + cpu.system) / 1000 / messages,
    pg: (pgAfter - pgBefore) / messages,
    statements: (queries.count - queriesBefore) / messages,
    perTransaction: messages / transactions,
  };
}

/** Runs one statement on a connection of its own (not counted); its first row's `n`, if any. */
async function withCount(text: string): Promise<number> {
  return Number((await firstRow<{ n?: string }>(text))?.n ?? NaN);
}

/** Runs one statement on a connection of its own (not counted); its first row. */
async function firstRow<Row extends pg.QueryResultRow>(text: string): Promise<Row | undefined> {
  const client = new pg.Client({ connectionString: database.url });
  await client.connect();
  queries.counting = false;
  try {
    return (await client.query<Row>(text)).rows[0];
  } finally {
    queries.counting = true;
    await client.end();
  }
}

/** The inbox's inserts, updates and HOT updates so far, as the statistics hold them. */
async function inboxUpdates(): Promise<string> {
  const row = await firstRow<{ ins: string; upd: string; hot: string }>(
    `SELECT n_tup_ins AS ins, n_tup_upd AS upd, n_tup_hot_upd AS hot FROM pg_stat_user_tables WHERE relname = 'inbox'`,
  );
  if (row === undefined) return 'inbox: no statistics';
  const [upd, hot] = [Number(row.upd), Number(row.hot)];
  const ratio = upd === 0 ? 'n/a' : `${((100 * hot) / upd).toFixed(1)}%`;
  return `inbox: ${row.ins} rows inserted, ${upd} updated, ${hot} of them HOT (${ratio})`;
}

try {
  await round('warm-up');
  // Statistics for the warm-up's rows, as autovacuum gives a running service's inbox: without them, the
  // plans the connections cached (prepared statements) are those of an empty table.
  await withCount('ANALYZE');
  const results: Awaited<ReturnType<typeof round>>[] = [];
  for (let r = 0; r < rounds; r++) {
    const result = await round(`r${r}-${randomUUID().slice(0, 6)}`);
    results.push(result);
    console.log(
      `round ${r + 1}: node ${result.node.toFixed(3)} ms, PostgreSQL ${result.pg.toFixed(3)} ms per message; ` +
        `${result.statements.toFixed(2)} statements per message; ${result.perTransaction.toFixed(1)} per transaction`,
    );
  }
  const m = (f: (r: (typeof results)[number]) => number) => median(results.map(f));
  console.log(
    `median of ${rounds} (${messages} messages in waves of ${wave}): node ${m((r) => r.node).toFixed(3)} ms + PostgreSQL ` +
      `${m((r) => r.pg).toFixed(3)} ms per message, ${m((r) => r.statements).toFixed(2)} statements per message, ` +
      `${m((r) => r.perTransaction).toFixed(1)} per transaction`,
  );
  // Backends flush their table counters when they exit: close the service's pool first.
  await app.close();
  console.log(await inboxUpdates());
} finally {
  await app.close();
  await database.drop();
}
