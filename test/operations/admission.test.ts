import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import type { Config } from '../../src/config.js';
import { postgresDatabase, skipUnlessPostgres, type TestDatabaseHandle } from '../support/databases.js';
import { holdStockRow, inboxRows, orderPlaced, seedBook, stockRow, tableCounts, testApp, type OrderPlaced } from '../support/fixtures.js';
import { eventually, waitUntilBlocked } from '../support/observe.js';
import { sample, scrape } from './prometheus.js';

/**
 * HTTP_MAX_COMMANDS_IN_FLIGHT: past it a command waits, unread, for a place at most HTTP_ADMISSION_WAIT_MS
 * (newest first), then is refused (503 overloaded, Retry-After) before its body is read; nothing
 * recorded; the bound frees as responses go out. Real sockets: the bound counts until a response's
 * connection says it is done.
 */

interface Served {
  app: FastifyInstance;
  post: (body: OrderPlaced, signal?: AbortSignal) => Promise<Response>;
  /** The admission gauges, as /metrics shows them. */
  gauges: () => Promise<{ inFlight: number; waiting: number }>;
  /** Waits (bounded) until the gauges read these counts; fails the test otherwise. */
  until: (inFlight: number, waiting: number) => Promise<void>;
  /**
   * A command that holds the only place: a book with 10 on hand whose stock row another transaction
   * holds, and an order of `quantity` for it, blocked on that row. `release` lets it commit.
   */
  holdPlace: (quantity: number) => Promise<{ bookId: string; first: Promise<Response>; release: () => Promise<void> }>;
}

function served(database: () => TestDatabaseHandle, config: Partial<Config>): { get: () => Served } {
  let app: FastifyInstance;
  let base: string;
  before(async () => {
    app = await testApp(database(), { config: { inboxPruneIntervalMs: 0, ...config } });
    await app.listen({ port: 0, host: '127.0.0.1' });
    base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  });
  after(async () => {
    // fetch may have opened a connection it never sent a request on; server.close() would wait for it.
    app?.server.closeAllConnections();
    await app?.close();
  });
  const post = (body: OrderPlaced, signal?: AbortSignal) =>
    fetch(`${base}/inventory/order-placed`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      ...(signal === undefined ? {} : { signal }),
    });
  const gauges = async () => {
    const text = await scrape(app);
    return { inFlight: sample(text, 'http_commands_in_flight') ?? NaN, waiting: sample(text, 'http_commands_waiting') ?? NaN };
  };
  return {
    get: () => ({
      app,
      post,
      gauges,
      holdPlace: async (quantity) => {
        const bookId = await seedBook(app, 10);
        const held = await holdStockRow(app.db, bookId);
        const first = post(orderPlaced(bookId, quantity));
        await waitUntilBlocked(database());
        return {
          bookId,
          first,
          release: async () => {
            held.release();
            await held.done;
          },
        };
      },
      until: async (inFlight, waiting) => {
        let last = { inFlight: NaN, waiting: NaN };
        const seen = await eventually(async () => {
          last = await gauges();
          return last.inFlight === inFlight && last.waiting === waiting;
        });
        assert.ok(seen, `expected ${inFlight} in flight and ${waiting} waiting, last seen ${JSON.stringify(last)}`);
      },
    }),
  };
}

async function assertOverloaded(refused: Response): Promise<void> {
  assert.equal(refused.status, 503);
  assert.equal(refused.headers.get('retry-after'), '1');
  assert.match(String(refused.headers.get('content-type')), /^application\/problem\+json/);
  const problem = (await refused.json()) as { type: string; detail: string };
  assert.equal(problem.type, '/problems/overloaded');
  assert.match(problem.detail, /HTTP_MAX_COMMANDS_IN_FLIGHT/);
}

describe('admission: commands in flight on one replica', { skip: skipUnlessPostgres }, () => {
  let database: TestDatabaseHandle;
  before(async () => {
    database = await postgresDatabase!.open();
  });
  after(async () => {
    await database?.close();
  });

  describe('no wait (HTTP_ADMISSION_WAIT_MS=0)', () => {
    const s = served(() => database, { httpMaxCommandsInFlight: 1, httpAdmissionWaitMs: 0 });

    test('one command in flight (its stock row held): the next is 503 overloaded with Retry-After at once, nothing recorded; then both bounds free', async () => {
      const { app, post, until, holdPlace } = s.get();
      const { bookId, first: pending, release } = await holdPlace(2);
      const before = await tableCounts(app.db);

      // Answered while the first still holds the only place: it did not wait for it.
      const refused = post(orderPlaced(bookId, 1));
      await assertOverloaded(await refused);
      assert.deepEqual(await tableCounts(app.db), before, 'the refused command recorded nothing');
      await until(1, 0);

      await release();
      const answered = await pending;
      assert.equal(answered.status, 201, await answered.text());
      // The first command's response went out: the bound is free again.
      const next = await post(orderPlaced(bookId, 3));
      assert.equal(next.status, 201, await next.text());
      assert.deepEqual(await stockRow(app.db, bookId), { on_hand: 10, reserved: 5 });
      await until(0, 0);
    });
  });

  describe('waiting for a place (HTTP_ADMISSION_WAIT_MS)', () => {
    const s = served(() => database, { httpMaxCommandsInFlight: 1, httpAdmissionWaitMs: 60_000, httpMaxCommandsWaiting: 2 });

    test('past the bound a command waits, unread, and is admitted when a place comes free: 201, not 503', async () => {
      const { app, post, until, holdPlace } = s.get();
      const { bookId, first, release } = await holdPlace(2);
      const second = orderPlaced(bookId, 1);
      const waiting = post(second);
      await until(1, 1);
      assert.deepEqual(await inboxRows(app.db, second.messageId), [], 'a waiting command has not been claimed');

      await release();
      assert.equal((await first).status, 201);
      const admitted = await waiting;
      assert.equal(admitted.status, 201, await admitted.text());
      assert.deepEqual(await stockRow(app.db, bookId), { on_hand: 10, reserved: 3 });
      await until(0, 0);
    });

    test('the place goes to the command that arrived last; past HTTP_MAX_COMMANDS_WAITING the one that waited longest is refused', async () => {
      const { app, post, until, holdPlace } = s.get();
      const { bookId, first, release } = await holdPlace(1);
      const oldest = orderPlaced(bookId, 1);
      const refused = post(oldest);
      await until(1, 1);
      const older = post(orderPlaced(bookId, 1));
      await until(1, 2);
      const newest = post(orderPlaced(bookId, 1));

      // A third waiter is one too many: the one that has waited longest makes room.
      await assertOverloaded(await refused);
      assert.deepEqual(await inboxRows(app.db, oldest.messageId), [], 'the refused command recorded nothing');
      await until(1, 2);

      await release();
      assert.equal((await first).status, 201);
      // The newest is admitted first; the older one only when the newest's response has gone out.
      const firstAnswered = await Promise.race([older.then(() => 'older'), newest.then(() => 'newest')]);
      assert.equal(firstAnswered, 'newest');
      assert.equal((await newest).status, 201);
      assert.equal((await older).status, 201);
      assert.deepEqual(await stockRow(app.db, bookId), { on_hand: 10, reserved: 3 });
      await until(0, 0);
    });

    test('a waiting command whose client gives up leaves the queue and takes no place; nothing recorded', async () => {
      const { app, post, until, holdPlace } = s.get();
      const { bookId, first, release } = await holdPlace(2);
      const abandoned = orderPlaced(bookId, 1);
      const abort = new AbortController();
      const gone = post(abandoned, abort.signal).catch((error: unknown) => error);
      await until(1, 1);
      abort.abort();
      assert.ok((await gone) instanceof Error);
      await until(1, 0);

      await release();
      assert.equal((await first).status, 201);
      await until(0, 0);
      const next = await post(orderPlaced(bookId, 3));
      assert.equal(next.status, 201, await next.text());
      assert.deepEqual(await inboxRows(app.db, abandoned.messageId), []);
      assert.deepEqual(await stockRow(app.db, bookId), { on_hand: 10, reserved: 5 });
    });
  });

  describe('a wait that runs out', () => {
    const s = served(() => database, { httpMaxCommandsInFlight: 1, httpAdmissionWaitMs: 1 });

    test('no place came free in HTTP_ADMISSION_WAIT_MS: 503 overloaded with Retry-After, nothing recorded; the held command still commits', async () => {
      const { app, post, until, holdPlace } = s.get();
      const { bookId, first: pending, release } = await holdPlace(2);
      const before = await tableCounts(app.db);

      await assertOverloaded(await post(orderPlaced(bookId, 1)));
      assert.deepEqual(await tableCounts(app.db), before, 'the refused command recorded nothing');
      await until(1, 0);

      await release();
      assert.equal((await pending).status, 201);
      assert.deepEqual(await stockRow(app.db, bookId), { on_hand: 10, reserved: 2 });
      await until(0, 0);
    });
  });
});
