import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { getHeapSpaceStatistics } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { releaseStartupMemory } from '../../src/runtime/startup-memory.js';
import { testDatabases } from '../support/databases.js';
import { json, newId, orderPlaced, placeOrder, seedBook, testApp } from '../support/fixtures.js';

/** The young generation's size in MB: what V8 holds for it, whether used or not. */
function youngGenerationMb(): number {
  const space = getHeapSpaceStatistics().find((s) => s.space_name === 'new_space');
  assert.ok(space, 'V8 reports a new_space');
  return space.space_size / 1024 / 1024;
}

/** Allocates objects that survive a few scavenges, as start-up does: V8 grows the young generation. */
function allocateLikeStartUp(): number {
  const window: unknown[] = new Array(200_000);
  let sum = 0;
  for (let i = 0; i < 3_000_000; i++) {
    window[i % window.length] = { i, text: `object ${i}` };
    sum += i;
  }
  return sum;
}

describe('releasing the memory start-up used (src/runtime/startup-memory.ts)', () => {
  test('the young generation shrinks back to its initial size, and no context is left with a global gc', () => {
    allocateLikeStartUp();
    const grown = youngGenerationMb();
    assert.ok(grown >= 8, `the young generation grew to only ${grown} MB; the test needs it grown`);
    releaseStartupMemory();
    const after = youngGenerationMb();
    assert.ok(after <= 2, `the young generation is still ${after} MB (was ${grown} MB)`);
    assert.equal(runInNewContext('typeof gc'), 'undefined', 'a context created afterwards has no gc');
    if (!process.execArgv.some((arg) => arg.startsWith('--expose-gc') || arg.startsWith('--expose_gc'))) {
      assert.equal(typeof globalThis.gc, 'undefined', 'the process has no global gc');
    }
  });

  test('a service built with releaseStartupMemory on PGlite is small when ready and takes commands as usual', async () => {
    const database = await testDatabases[0]!.open();
    try {
      allocateLikeStartUp();
      const app = await testApp(database, { releaseStartupMemory: true, config: { inboxPruneIntervalMs: 0 } });
      try {
        assert.ok(youngGenerationMb() <= 2, `the young generation is ${youngGenerationMb()} MB when ready`);
        const ready = await app.inject({ url: '/health/ready' });
        assert.equal(ready.statusCode, 200);
        assert.deepEqual(json(ready), { status: 'ok' });
        const bookId = await seedBook(app, 10, newId());
        const message = orderPlaced(bookId, 2);
        const first = await placeOrder(app, message);
        assert.equal(first.statusCode, 201, first.body);
        const copy = await placeOrder(app, message);
        assert.equal(copy.statusCode, 200, copy.body);
        assert.equal(copy.headers['idempotent-replayed'], 'true');
        const stock = await app.inject({ url: `/stock/${bookId}` });
        assert.equal(stock.statusCode, 200);
        assert.equal(json<{ reserved: number }>(stock).reserved, 2);
      } finally {
        await app.close();
      }
    } finally {
      await database.close();
    }
  });
});
