import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { sql } from 'kysely';
import type { Db } from '../../src/schema/database.js';
import type { SeamMessage } from '../../src/plugins/test-seams.js';
import { testDatabases, type TestDatabaseHandle } from '../support/databases.js';
import {
  admin,
  inboxRows,
  json,
  orderPlaced,
  placeOrder,
  reservedOf,
  seedBook,
  testApp,
  type Problem,
  type CommandAnswer,
  type Pruned,
} from '../support/fixtures.js';

/** Polls `condition` every 5 ms until it holds; fails after `timeoutMs` (bounded in count and time). */
async function until(condition: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

/**
 * A transaction held open before its commit, so that the commands sent meanwhile queue behind it and
 * go into the next transaction together: how a batch forms under load, made deterministic.
 */
class Holder {
  readonly blockerId = `blocker-${crypto.randomUUID()}`;
  reached = false;
  #release: () => void = () => {};
  readonly #released = new Promise<void>((resolve) => {
    this.#release = resolve;
  });
  /** Message ids whose work throws before commit (a poison message). */
  readonly poison = new Set<string>();

  readonly beforeCommit = async (message: SeamMessage): Promise<void> => {
    if (message.messageId === this.blockerId) {
      this.reached = true;
      await this.#released;
    }
    if (this.poison.has(message.messageId)) throw new Error(`poison message ${message.messageId}`);
  };

  release(): void {
    this.#release();
  }
}

/**
 * Sends the blocker, waits until its transaction is held, then sends each message once the previous
 * one is queued (so the queue holds them in the order given); resolves with the answers after the
 * blocker is released.
 */
async function sendAsOneBatch(
  app: FastifyInstance,
  holder: Holder,
  bookId: string,
  messages: unknown[],
): Promise<{ blocker: LightMyRequestResponse; answers: LightMyRequestResponse[] }> {
  const blocker = placeOrder(app, orderPlaced(bookId, 1, holder.blockerId));
  try {
    await until(() => holder.reached, 'the blocking transaction');
    const answers: Promise<LightMyRequestResponse>[] = [];
    for (const message of messages) {
      // A copy of a key already sent waits for that copy instead of queueing.
      const before = app.commands.queued + app.commands.joined;
      answers.push(placeOrder(app, message));
      await until(() => app.commands.queued + app.commands.joined > before, 'the command to queue');
    }
    holder.release();
    return { blocker: await blocker, answers: await Promise.all(answers) };
  } finally {
    holder.release();
  }
}

/** Resolves with `answer`, or fails the test when it is still unanswered after `ms` (a caller left waiting). */
async function answered<T>(answer: Promise<T>, what: string, ms = 15_000): Promise<T> {
  const unanswered = sleep(ms, undefined, { ref: false }).then(() => assert.fail(`${what}: no answer after ${ms} ms`));
  return Promise.race([answer, unanswered]);
}

/** The transaction that wrote each message's inbox row (PostgreSQL's xmin; SQL Server, MariaDB: the received_at of the batch). */
async function writers(db: Db, kind: string, messageIds: string[]): Promise<Set<string>> {
  if (kind === 'mssql' || kind === 'mysql') {
    const rows = await db.selectFrom('inbox').select('received_at').where('message_id', 'in', messageIds).execute();
    return new Set(rows.map((r) => r.received_at.toISOString()));
  }
  const { rows } = await sql<{ xmin: string }>`select xmin::text as xmin from inbox where message_id in (${sql.join(messageIds)})`.execute(
    db,
  );
  return new Set(rows.map((r) => r.xmin));
}

async function metric(app: FastifyInstance, line: RegExp): Promise<number> {
  const res = await app.inject({ method: 'GET', url: '/metrics' });
  const match = res.body.split('\n').find((l) => line.test(l));
  return match === undefined ? 0 : Number(match.split(' ').at(-1));
}

for (const target of testDatabases) {
  describe(`group commit on ${target.name}`, { timeout: 120_000 }, () => {
    let database: TestDatabaseHandle;

    before(async () => {
      database = await target.open();
    });
    after(async () => {
      await database?.close();
    });

    async function batchingApp(
      holder: Holder,
      config: Record<string, unknown> = {},
      beforeCommit = holder.beforeCommit,
    ): Promise<FastifyInstance> {
      return testApp(database, { config: { inboxBatchConcurrency: 1, ...config }, testHooks: { beforeCommit } });
    }

    test('commands queued behind a transaction commit together, decided in arrival order: two orders for one book where stock covers only the first', async (t) => {
      const holder = new Holder();
      const app = await batchingApp(holder);
      t.after(() => app.close());
      const book = await seedBook(app, 4);
      // The blocker takes 1, leaving 3: the first order (2) fits, the second (2) does not, the third (1) fits.
      const first = orderPlaced(book, 2);
      const second = orderPlaced(book, 2);
      const third = orderPlaced(book, 1);

      const { blocker, answers } = await sendAsOneBatch(app, holder, book, [first, second, third]);

      assert.equal(blocker.statusCode, 201);
      assert.deepEqual(
        answers.map((a) => a.statusCode),
        [201, 201, 201],
      );
      assert.deepEqual(
        answers.map((a) => json<CommandAnswer>(a).outcome.result),
        ['reserved', 'insufficient-stock', 'reserved'],
      );
      assert.equal(json<CommandAnswer>(answers[1]!).outcome.available, 1, 'the refusal records the figure left by the first order');
      assert.equal(await reservedOf(database.db, book), 4);
      const ids = [first, second, third].map((m) => m.messageId);
      assert.equal((await writers(database.db, target.name, ids)).size, 1, 'the three inbox rows were written by one transaction');
      const reservations = await database.db.selectFrom('stock_reservations').select('reserved_by').where('book_id', '=', book).execute();
      assert.deepEqual(new Set(reservations.map((r) => r.reserved_by)), new Set([holder.blockerId, first.messageId, third.messageId]));
      assert.equal(await metric(app, /^inbox_batch_size_count\{consumer="inventory.reserve-stock"\}/), 1);
    });

    test('copies of one key in a batch: the first is processed, the others answer 200 with its outcome', async (t) => {
      const holder = new Holder();
      const app = await batchingApp(holder);
      t.after(() => app.close());
      const book = await seedBook(app, 100);
      const message = orderPlaced(book, 3);
      const other = orderPlaced(book, 5);

      const { answers } = await sendAsOneBatch(app, holder, book, [message, other, message, message]);

      const forMessage = [answers[0]!, answers[2]!, answers[3]!];
      assert.equal(forMessage.filter((a) => a.statusCode === 201).length, 1);
      assert.equal(forMessage.filter((a) => a.statusCode === 200 && a.headers['idempotent-replayed'] === 'true').length, 2);
      for (const answer of forMessage) assert.deepEqual(json<CommandAnswer>(answer).outcome, json<CommandAnswer>(answers[0]!).outcome);
      assert.equal(answers[1]!.statusCode, 201);
      assert.equal(await reservedOf(database.db, book), 1 + 3 + 5);
      assert.equal((await inboxRows(database.db, message.messageId)).length, 1);
    });

    test('a poison message inside a batch fails alone: the others commit, it gets its own answer and leaves nothing', async (t) => {
      const holder = new Holder();
      const app = await batchingApp(holder);
      t.after(() => app.close());
      const book = await seedBook(app, 100);
      const good1 = orderPlaced(book, 2);
      const poison = orderPlaced(book, 7);
      const good2 = orderPlaced(book, 3);
      holder.poison.add(poison.messageId);

      const { answers } = await sendAsOneBatch(app, holder, book, [good1, poison, good2]);

      assert.deepEqual(
        answers.map((a) => a.statusCode),
        [201, 500, 201],
      );
      assert.equal(json<Problem>(answers[1]!).type, '/problems/internal-error');
      assert.equal(await reservedOf(database.db, book), 1 + 2 + 3);
      assert.equal((await inboxRows(database.db, poison.messageId)).length, 0, 'the poison message left no inbox row');
      const poisonReservations = await database.db
        .selectFrom('stock_reservations')
        .selectAll()
        .where('order_id', '=', poison.data.orderId)
        .execute();
      assert.equal(poisonReservations.length, 0);

      holder.poison.clear();
      const redelivered = await placeOrder(app, poison);
      assert.equal(redelivered.statusCode, 201, 'once it no longer fails, a redelivery processes it');
      assert.equal(await reservedOf(database.db, book), 1 + 2 + 3 + 7);
    });

    test('a poison message in a batch of 40 fails alone, and the retries hold one transaction at a time: the 39 others commit, none is refused', async (t) => {
      const holder = new Holder();
      // Transactions of the lane inside their work at the same moment, and the most seen at once.
      let open = 0;
      let most = 0;
      const app = await batchingApp(holder, { inboxBatchMax: 64 }, async (message) => {
        if (message.messageId !== holder.blockerId) {
          most = Math.max(most, ++open);
          try {
            await sleep(10); // long enough for transactions running side by side to overlap here
          } finally {
            open--;
          }
        }
        await holder.beforeCommit(message);
      });
      t.after(() => app.close());
      const book = await seedBook(app, 100);
      // A book each: no row lock lines the retries up, only the lane's own bound can.
      const books: string[] = [];
      for (let i = 0; i < 40; i++) books.push(await seedBook(app, 5));
      const orders = books.map((b) => orderPlaced(b, 1));
      const poison = orders[17]!;
      holder.poison.add(poison.messageId);

      const { blocker, answers } = await sendAsOneBatch(app, holder, book, orders);

      assert.equal(blocker.statusCode, 201);
      const statuses = answers.map((a) => a.statusCode);
      assert.deepEqual(
        statuses,
        orders.map((o) => (o === poison ? 500 : 201)),
      );
      assert.equal(json<Problem>(answers[17]!).type, '/problems/internal-error');
      assert.equal(most, 1, 'the lane (concurrency 1) never had two transactions at once, retries included');
      assert.deepEqual(
        await Promise.all(books.map((b) => reservedOf(database.db, b))),
        orders.map((o) => (o === poison ? 0 : 1)),
      );
      assert.equal((await inboxRows(database.db, poison.messageId)).length, 0);
    });

    test('metrics and a duplicate cache that throw after a commit do not keep committed commands from their answers', async (t) => {
      const holder = new Holder();
      const app = await batchingApp(holder);
      t.after(() => app.close());
      const book = await seedBook(app, 100);
      const broken = () => {
        throw new Error('observer broken');
      };
      const remember = app.duplicateCache.remember.bind(app.duplicateCache);
      app.metrics.recordBatch = broken;
      app.metrics.recordCacheHit = broken;
      app.duplicateCache.remember = broken;
      const batch = [orderPlaced(book, 2), orderPlaced(book, 3), orderPlaced(book, 4)];

      const { blocker, answers } = await answered(sendAsOneBatch(app, holder, book, batch), 'a batch');
      assert.deepEqual(
        [blocker, ...answers].map((a) => a.statusCode),
        [201, 201, 201, 201],
        'the blocker ran alone, the three others as one batch',
      );
      const single = orderPlaced(book, 5);
      assert.equal((await answered(placeOrder(app, single), 'a single command')).statusCode, 201);
      assert.equal((await answered(placeOrder(app, single), 'a copy answered by the database')).statusCode, 200);
      assert.equal(await reservedOf(database.db, book), 1 + 2 + 3 + 4 + 5, 'each committed once');

      app.duplicateCache.remember = remember;
      const cached = orderPlaced(book, 6);
      assert.equal((await placeOrder(app, cached)).statusCode, 201);
      const copy = await answered(placeOrder(app, cached), 'a copy answered from the cache');
      assert.equal(copy.statusCode, 200);
      assert.equal(copy.headers['idempotent-replayed'], 'true');
      assert.equal(await reservedOf(database.db, book), 1 + 2 + 3 + 4 + 5 + 6);
    });

    test('past the queue limit a command gets 503 overloaded with Retry-After, and nothing of it is recorded', async (t) => {
      const holder = new Holder();
      const app = await batchingApp(holder, { inboxQueueLimit: 2 });
      t.after(() => app.close());
      const book = await seedBook(app, 100);
      const queued = [orderPlaced(book, 1), orderPlaced(book, 1)];
      const refused = [orderPlaced(book, 1), orderPlaced(book, 1), orderPlaced(book, 1)];

      const blocker = placeOrder(app, orderPlaced(book, 1, holder.blockerId));
      t.after(() => holder.release());
      await until(() => holder.reached, 'the blocking transaction');
      const accepted = queued.map((m) => placeOrder(app, m));
      await until(() => app.commands.queued === 2, 'two queued commands');
      const shed = await Promise.all(refused.map((m) => placeOrder(app, m)));
      holder.release();
      const answers = await Promise.all(accepted);

      for (const answer of shed) {
        assert.equal(answer.statusCode, 503);
        assert.equal(answer.headers['retry-after'], '1');
        assert.match(String(answer.headers['content-type']), /^application\/problem\+json/);
        assert.equal(json<Problem>(answer).type, '/problems/overloaded');
      }
      for (const message of refused) assert.equal((await inboxRows(database.db, message.messageId)).length, 0);
      assert.equal((await blocker).statusCode, 201);
      assert.deepEqual(
        answers.map((a) => a.statusCode),
        [201, 201],
      );
      assert.equal(await reservedOf(database.db, book), 3, 'the blocker and the two queued orders, none of the refused');
      assert.equal(await metric(app, /^inbox_commands_total\{consumer="inventory.reserve-stock",result="overloaded"\}/), 3);

      const retried = await placeOrder(app, refused[0]);
      assert.equal(retried.statusCode, 201, 'a refused command retried later is processed');
    });

    test('a batch of 200 orders for 200 books (the largest INBOX_BATCH_MAX allows) commits as one transaction: stock, inbox and outbox rows', async (t) => {
      const holder = new Holder();
      const app = await batchingApp(holder, { inboxBatchMax: 200 });
      t.after(() => app.close());
      const books: string[] = [];
      for (let i = 0; i < 200; i++) books.push(await seedBook(app, 3));
      const messages = books.map((book) => orderPlaced(book, 2));

      const { blocker, answers } = await sendAsOneBatch(app, holder, books[0]!, messages);

      assert.equal(blocker.statusCode, 201);
      assert.deepEqual(new Set(answers.map((a) => a.statusCode)), new Set([201]));
      assert.deepEqual(new Set(answers.map((a) => json<CommandAnswer>(a).outcome.result)), new Set(['reserved']));
      const ids = messages.map((m) => m.messageId);
      assert.equal((await writers(database.db, target.name, ids)).size, 1, 'the 200 inbox rows were written by one transaction');
      const stock = await database.db.selectFrom('stock_items').select(['book_id', 'reserved']).where('book_id', 'in', books).execute();
      assert.deepEqual(
        stock.map((s) => s.reserved).sort(),
        [...Array<number>(199).fill(2), 3],
        'each book reserved 2, the first one also the blocker',
      );
      const completed = await database.db
        .selectFrom('inbox')
        .select('outcome')
        .where('message_id', 'in', ids)
        .where('completed_at', 'is not', null)
        .execute();
      assert.equal(completed.length, 200);
      const events = await database.db
        .selectFrom('outbox')
        .select(['causation_id', 'ordering_key', 'type'])
        .where('causation_id', 'in', ids)
        .execute();
      assert.equal(events.length, 200, 'one stock-reserved event per order');
      assert.deepEqual(
        new Set(events.map((e) => `${e.causation_id} ${e.ordering_key.toLowerCase()}`)),
        new Set(messages.map((m) => `${m.messageId} ${m.data.bookId}`)),
      );
      assert.equal(await metric(app, /^inbox_batch_size_sum\{consumer="inventory.reserve-stock"\}/), 200);
    });
  });

  describe(`duplicate cache on ${target.name}`, { timeout: 60_000 }, () => {
    let database: TestDatabaseHandle;

    before(async () => {
      database = await target.open();
    });
    after(async () => {
      await database?.close();
    });

    const hits = (app: FastifyInstance) => metric(app, /^inbox_duplicate_cache_hits_total\{consumer="inventory.reserve-stock"\}/);

    test('a copy is answered from memory with the recorded outcome; another payload under the key is still a 422 and a dead letter', async (t) => {
      const app = await testApp(database);
      t.after(() => app.close());
      const book = await seedBook(app, 10);
      const message = orderPlaced(book, 2);
      const first = await placeOrder(app, message);
      const copy = await placeOrder(app, message);
      const changed = await placeOrder(app, { ...message, data: { ...message.data, quantity: 9 } });

      assert.equal(first.statusCode, 201);
      assert.equal(copy.statusCode, 200);
      assert.deepEqual({ ...json<CommandAnswer>(copy), status: 'processed' }, json(first));
      assert.equal(await hits(app), 2, 'both later copies were looked up in the cache');
      assert.equal(changed.statusCode, 422);
      assert.equal(json<Problem>(changed).type, '/problems/idempotency-key-reused');
      const deadLetterId = String(json<Problem>(changed).deadLetter).split('/').at(-1)!;
      const letter = await database.db
        .selectFrom('dead_letters')
        .selectAll()
        .where('message_id', '=', message.messageId)
        .executeTakeFirstOrThrow();
      assert.equal(String(letter.id), deadLetterId);
      assert.equal(letter.stored_fingerprint, json<Problem>(changed).storedFingerprint);
      assert.equal(await reservedOf(database.db, book), 2, 'neither copy applied anything');
    });

    test('after a restart the cache is empty and the database answers the copy the same way', async () => {
      const first = await testApp(database);
      const book = await seedBook(first, 10);
      const message = orderPlaced(book, 4);
      const processed = await placeOrder(first, message);
      await first.close();

      const restarted = await testApp(database);
      try {
        const copy = await placeOrder(restarted, message);
        assert.equal(copy.statusCode, 200);
        assert.deepEqual(json<CommandAnswer>(copy).outcome, json<CommandAnswer>(processed).outcome);
        assert.equal(await hits(restarted), 0, 'answered by the database');
        const again = await placeOrder(restarted, message);
        assert.equal(again.statusCode, 200);
        assert.equal(await hits(restarted), 1, 'then remembered');
        assert.equal(await reservedOf(database.db, book), 4);
      } finally {
        await restarted.close();
      }
    });

    test('after retention pruned the key, the cache does not answer for it: the copy is processed again, as documented', async (t) => {
      let clock = Date.parse('2026-01-01T00:00:00Z');
      const app = await testApp(database, { now: () => new Date(clock) });
      t.after(() => app.close());
      const book = await seedBook(app, 10);
      const message = orderPlaced(book, 1);
      assert.equal((await placeOrder(app, message)).statusCode, 201);
      assert.equal((await placeOrder(app, message)).statusCode, 200);
      assert.equal(await hits(app), 1);

      clock += (14 + 1) * 86_400_000;
      const pruned = await app.inject({ method: 'POST', url: '/inbox/prune', headers: admin });
      assert.equal(pruned.statusCode, 200);
      assert.ok(json<Pruned>(pruned).inbox >= 1);
      assert.equal((await inboxRows(database.db, message.messageId)).length, 0);

      const late = await placeOrder(app, message);
      assert.equal(late.statusCode, 201, 'the key is gone from the database, and from the cache');
      assert.equal(await hits(app), 1);
      assert.equal((await inboxRows(database.db, message.messageId)).length, 1);
    });
  });
}
