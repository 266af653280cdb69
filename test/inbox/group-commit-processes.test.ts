import assert from 'node:assert/strict';
import { randomInt } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { serverDatabases, type TestDatabaseHandle } from '../support/databases.js';
import { ADMIN_TOKEN, orderPlaced, reservedOf, type OrderPlaced } from '../support/fixtures.js';
import { postJson, seedBookOverHttp, startServer, type ServerProcess } from '../support/server-process.js';

function shuffled<T>(items: readonly T[]): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = randomInt(i + 1);
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

async function metricSum(baseUrl: string, name: string): Promise<number> {
  const text = await (await fetch(`${baseUrl}/metrics`, { signal: AbortSignal.timeout(10_000) })).text();
  return text
    .split('\n')
    .filter((l) => l.startsWith(name))
    .reduce((sum, l) => sum + Number(l.split(' ').at(-1)), 0);
}

/**
 * Two service processes on one database server, each batching, receiving the same keys in different
 * orders at the same time: their batches claim overlapping keys. Claims are taken in key order, so the
 * batches wait on each other instead of deadlocking, and every key is processed exactly once.
 */
for (const target of serverDatabases) {
  describe(`group commit across two processes on ${target.name}`, { timeout: 180_000 }, () => {
    let database: TestDatabaseHandle;
    const servers: ServerProcess[] = [];

    before(async () => {
      database = await target.open();
      // Each transaction held 20 ms before commit, one at a time per process: the rest queue and batch.
      for (let i = 0; i < 2; i++) {
        servers.push(await startServer({ DATABASE_URL: database.url, ADMIN_TOKEN, SEAM_HOLD_MS: '20', INBOX_BATCH_CONCURRENCY: '1' }));
      }
    });
    after(async () => {
      await Promise.all(servers.map((s) => s.stop()));
      await database?.close();
    });

    test('batches with overlapping keys in two processes: no error reaches a client, each key is processed once', async () => {
      const [a, b] = servers as [ServerProcess, ServerProcess];
      const book = await seedBookOverHttp(a.baseUrl, ADMIN_TOKEN, 100_000);
      const messages: OrderPlaced[] = Array.from({ length: 120 }, (_, i) => orderPlaced(book, 1 + (i % 5)));

      const send = (server: ServerProcess, list: OrderPlaced[]) =>
        Promise.all(list.map((m) => postJson(`${server.baseUrl}/inventory/order-placed`, m).then((r) => ({ id: m.messageId, ...r }))));
      const [fromA, fromB] = await Promise.all([send(a, shuffled(messages)), send(b, shuffled(messages))]);

      const answers = [...fromA, ...fromB];
      const unexpected = answers.filter((r) => r.status !== 200 && r.status !== 201);
      assert.deepEqual(
        unexpected.map((r) => `${r.status} ${JSON.stringify(r.body)}`),
        [],
      );
      for (const m of messages) {
        const mine = answers.filter((r) => r.id === m.messageId);
        assert.equal(mine.filter((r) => r.status === 201).length, 1, `exactly one 201 for ${m.messageId}`);
        assert.deepEqual(mine[0]!.body?.outcome, mine[1]!.body?.outcome);
      }
      const expected = messages.reduce((sum, m) => sum + m.data.quantity, 0);
      assert.equal(await reservedOf(database.db, book), expected);
      const rows = await database.db.selectFrom('inbox').select(['message_id', 'completed_at']).execute();
      assert.equal(rows.length, messages.length);
      assert.ok(rows.every((r) => r.completed_at !== null));
      // Both processes committed batches of several commands (which of them won each key is up to timing).
      assert.ok((await metricSum(a.baseUrl, 'inbox_batch_size_count')) > 0, 'process A committed batches');
      assert.ok((await metricSum(b.baseUrl, 'inbox_batch_size_count')) > 0, 'process B committed batches');
    });
  });
}
