import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { sql, type Kysely } from 'kysely';
import { createConnection } from 'mysql2/promise';
import pg from 'pg';
import { buildPaymentsApp, type PaymentsAppOptions } from '../app.js';
import { creditAccount } from '../credit-account.js';
import { openDatabase } from '../database.js';
import { migrateToLatest, type Database } from '../schema.js';

/**
 * The payments receiver through HTTP, on embedded PGlite and, when TEST_POSTGRES_URL is set, on a
 * PostgreSQL database of its own (created for the suite, dropped after); when TEST_MYSQL_URL is set, on
 * a MariaDB/MySQL database of its own too. Balances are read through
 * GET /accounts/:id, and the credits, inbox and dead-letter rows from the database itself.
 */

const LOCK_TIMEOUT_MS = 5000;
const CONSUMER = creditAccount.consumer;

interface Target {
  readonly name: 'pglite' | 'postgres' | 'mysql';
  open(): Promise<{ db: Kysely<Database>; close(): Promise<void> }>;
}

const pglite: Target = {
  name: 'pglite',
  async open() {
    const { db } = openDatabase(undefined, { lockTimeoutMs: LOCK_TIMEOUT_MS });
    await migrateToLatest(db);
    return { db, close: () => db.destroy() };
  },
};

/** A new database on the server at `adminUrl`, migrated; close() drops it. */
function postgres(adminUrl: string): Target {
  async function admin(statement: string): Promise<void> {
    const client = new pg.Client({ connectionString: adminUrl });
    await client.connect();
    try {
      await client.query(statement);
    } finally {
      await client.end();
    }
  }
  return {
    name: 'postgres',
    async open() {
      const name = `payments_test_${randomBytes(6).toString('hex')}`;
      await admin(`CREATE DATABASE ${name}`);
      const url = new URL(adminUrl);
      url.pathname = `/${name}`;
      const { db } = openDatabase(url.toString(), { lockTimeoutMs: LOCK_TIMEOUT_MS });
      await migrateToLatest(db);
      return {
        db,
        async close() {
          await db.destroy();
          await admin(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
        },
      };
    },
  };
}

/** A new database on the MariaDB/MySQL server at `adminUrl` (a user that may create databases), migrated; close() drops it. */
function mysql(adminUrl: string): Target {
  async function admin(statement: string): Promise<void> {
    const u = new URL(adminUrl.replace(/^mariadb:/, 'mysql:'));
    const connection = await createConnection({
      host: u.hostname,
      port: u.port === '' ? 3306 : Number(u.port),
      user: decodeURIComponent(u.username) || 'root',
      password: decodeURIComponent(u.password),
    });
    try {
      await connection.query(statement);
    } finally {
      await connection.end();
    }
  }
  return {
    name: 'mysql',
    async open() {
      const name = `payments_test_${randomBytes(6).toString('hex')}`;
      await admin(`CREATE DATABASE ${name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin`);
      const url = new URL(adminUrl);
      url.pathname = `/${name}`;
      const { db } = openDatabase(url.toString(), { lockTimeoutMs: LOCK_TIMEOUT_MS });
      const drop = async () => {
        await db.destroy();
        await admin(`DROP DATABASE IF EXISTS ${name}`);
      };
      // A failed migration must not leave the pool open: it would keep the test process alive.
      await migrateToLatest(db).catch(async (error: unknown) => {
        await drop();
        throw error;
      });
      return {
        db,
        async close() {
          await drop();
        },
      };
    },
  };
}

const adminUrl = process.env.TEST_POSTGRES_URL;
const mysqlUrl = process.env.TEST_MYSQL_URL;
const targets: Target[] = [pglite, ...(adminUrl ? [postgres(adminUrl)] : []), ...(mysqlUrl ? [mysql(mysqlUrl)] : [])];
if (!adminUrl) describe('payments on postgres', { skip: 'TEST_POSTGRES_URL is not set' }, () => {});
if (!mysqlUrl) describe('payments on mysql', { skip: 'TEST_MYSQL_URL is not set' }, () => {});

/** How many transactions wait on a lock of the inbox table, from the engine's own view. */
async function waitingOnInbox(db: Kysely<Database>, engine: Target['name']): Promise<number> {
  const { rows } =
    engine === 'mysql'
      ? await sql<{ n: number | string }>`
          select count(*) as n from information_schema.INNODB_TRX
          where trx_state = 'LOCK WAIT' and trx_query like '%inbox%'`.execute(db)
      : await sql<{ n: number }>`
          select count(*)::int as n from pg_stat_activity
          where datname = current_database() and wait_event_type = 'Lock' and query like '%"inbox"%'`.execute(db);
  return Number(rows[0]!.n);
}

/** A JSON column's value: MariaDB keeps JSON as text, and the raw row hands it over as text. */
const parsed = (value: unknown): unknown => (typeof value === 'string' ? JSON.parse(value) : value);

interface PaymentEvent {
  messageId: string;
  data: { paymentId: string; accountId: string; amountCents: number };
}

type Outcome =
  | { result: 'credited'; paymentId: string; accountId: string; balanceCents: number }
  | { result: 'already-credited'; paymentId: string; creditedBy: string };

interface Answer {
  status: 'processed' | 'duplicate';
  consumer: string;
  messageId: string;
  outcome: Outcome;
}

const newAccount = () => `acc-${randomBytes(6).toString('hex')}`;

function paymentEvent(accountId: string, amountCents: number): PaymentEvent {
  return { messageId: `evt-${randomUUID()}`, data: { paymentId: `pay-${randomUUID()}`, accountId, amountCents } };
}

function json<T>(response: LightMyRequestResponse): T {
  return response.json<T>();
}

for (const target of targets) {
  describe(`payments on ${target.name}`, () => {
    let database: Awaited<ReturnType<Target['open']>>;
    let db: Kysely<Database>;
    let app: FastifyInstance;

    /** A receiver on the suite's database; several may share it, like replicas of one service. */
    function receiver(options: Omit<PaymentsAppOptions, 'db'> = {}): Promise<FastifyInstance> {
      // PGlite runs one transaction at a time: a second transaction slot would only wait for the first.
      const batch = target.name === 'pglite' ? { concurrency: 1 } : {};
      return buildPaymentsApp({ db, lockTimeoutMs: LOCK_TIMEOUT_MS, batch, ...options });
    }

    const send = (to: FastifyInstance, event: PaymentEvent) => to.inject({ method: 'POST', url: '/payment-events', payload: event });

    /** The balance GET /accounts/:id reports; undefined for an account nothing credited (404). */
    async function balanceOf(accountId: string): Promise<number | undefined> {
      const response = await app.inject({ method: 'GET', url: `/accounts/${accountId}` });
      if (response.statusCode === 404) return undefined;
      assert.equal(response.statusCode, 200);
      return json<{ balanceCents: number }>(response).balanceCents;
    }

    const creditsOf = (paymentId: string) => db.selectFrom('credits').selectAll().where('payment_id', '=', paymentId).execute();
    const inboxRows = (messageId: string) => db.selectFrom('inbox').selectAll().where('message_id', '=', messageId).execute();

    before(async () => {
      database = await target.open();
      db = database.db;
      app = await receiver();
    });
    after(async () => {
      await app?.close();
      await database?.close();
    });

    test('the same message twice: 201 then 200 with the first outcome, credited once', async () => {
      const account = newAccount();
      const event = paymentEvent(account, 1500);

      const first = await send(app, event);
      const second = await send(app, event);

      assert.equal(first.statusCode, 201);
      assert.equal(first.headers['idempotent-replayed'], undefined);
      assert.equal(json<Answer>(first).status, 'processed');
      assert.deepEqual(json<Answer>(first).outcome, {
        result: 'credited',
        paymentId: event.data.paymentId,
        accountId: account,
        balanceCents: 1500,
      });
      assert.equal(second.statusCode, 200);
      assert.equal(second.headers['idempotent-replayed'], 'true');
      assert.deepEqual({ ...json<Answer>(second), status: 'processed' }, json(first), 'a replay is the first answer but for status');
      assert.equal(await balanceOf(account), 1500);
      assert.equal((await creditsOf(event.data.paymentId)).length, 1);
      const rows = await inboxRows(event.messageId);
      assert.equal(rows.length, 1);
      assert.equal(rows[0]!.consumer, CONSUMER);
      assert.notEqual(rows[0]!.completed_at, null);
    });

    test('the same payment under a new message id (a producer duplicate) is processed and credits nothing', async () => {
      const account = newAccount();
      const original = paymentEvent(account, 700);
      const resent = { ...original, messageId: `evt-${randomUUID()}` };

      assert.equal((await send(app, original)).statusCode, 201);
      const second = await send(app, resent);

      assert.equal(second.statusCode, 201, 'a new message id is a new message: processed, not replayed');
      assert.deepEqual(json<Answer>(second).outcome, {
        result: 'already-credited',
        paymentId: original.data.paymentId,
        creditedBy: original.messageId,
      });
      assert.equal(await balanceOf(account), 700);
      assert.equal((await creditsOf(original.data.paymentId)).length, 1);
    });

    test('two copies at once on two replicas: the second claim waits for the first transaction; one 201, one 200, one credit', async () => {
      const account = newAccount();
      const event = paymentEvent(account, 2500);
      // The first copy to run the work holds its transaction open until the test lets it commit.
      let entered!: () => void;
      const inWork = new Promise<void>((resolve) => (entered = resolve));
      let commit!: () => void;
      const committing = new Promise<void>((resolve) => (commit = resolve));
      const slow: typeof creditAccount = {
        ...creditAccount,
        run: async (trx, item, now, writes) => {
          const outcome = await creditAccount.run(trx, item, now, writes);
          entered();
          await committing;
          return outcome;
        },
      };
      const [one, two] = [await receiver({ kind: slow }), await receiver({ kind: slow })];
      try {
        const both = Promise.all([send(one, event), send(two, event)]);
        await inWork;
        if (target.name !== 'pglite') {
          // The other copy's claim is an insert of the same inbox key: it waits on the first one's row lock.
          let waiting = 0;
          for (let polls = 0; polls < 60 && waiting === 0; polls++) {
            waiting = await waitingOnInbox(db, target.name);
            if (waiting === 0) await sleep(50);
          }
          assert.equal(waiting, 1, "the second copy's claim blocks on the first copy's uncommitted claim");
        } else {
          // PGlite is one connection: the second copy's transaction waits for the first to end.
          await sleep(50);
        }
        commit();
        const responses = await both;

        assert.deepEqual(responses.map((r) => r.statusCode).sort(), [200, 201]);
        const processed = responses.find((r) => r.statusCode === 201)!;
        const duplicate = responses.find((r) => r.statusCode === 200)!;
        assert.equal(duplicate.headers['idempotent-replayed'], 'true');
        assert.deepEqual(json<Answer>(duplicate).outcome, json<Answer>(processed).outcome);
        assert.equal(json<Answer>(processed).outcome.result, 'credited');
        assert.equal((await creditsOf(event.data.paymentId)).length, 1);
        assert.equal(await balanceOf(account), 2500);
      } finally {
        commit();
        await one.close();
        await two.close();
      }
    });

    test('two copies at once on one receiver: one 201, one 200, one credit', async () => {
      const account = newAccount();
      const event = paymentEvent(account, 300);

      const responses = await Promise.all([send(app, event), send(app, event)]);

      assert.deepEqual(responses.map((r) => r.statusCode).sort(), [200, 201]);
      assert.equal((await creditsOf(event.data.paymentId)).length, 1);
      assert.equal(await balanceOf(account), 300);
    });

    test('a crash after the credit, before commit, keeps nothing; the redelivery credits once', async () => {
      const account = newAccount();
      assert.equal((await send(app, paymentEvent(account, 1000))).statusCode, 201);
      const event = paymentEvent(account, 400);
      const crashing: typeof creditAccount = {
        ...creditAccount,
        run: async (trx, item, now, writes) => {
          await creditAccount.run(trx, item, now, writes);
          throw new Error('the receiver crashed before commit');
        },
      };
      const broken = await receiver({ kind: crashing });
      try {
        const crashed = await send(broken, event);
        assert.equal(crashed.statusCode, 500);
      } finally {
        await broken.close();
      }
      assert.equal(await balanceOf(account), 1000, 'the credit rolled back with the claim');
      assert.equal((await creditsOf(event.data.paymentId)).length, 0);
      assert.equal((await inboxRows(event.messageId)).length, 0, 'no inbox row survives the crash');

      const redelivered = await send(app, event);
      assert.equal(redelivered.statusCode, 201);
      assert.deepEqual(json<Answer>(redelivered).outcome, {
        result: 'credited',
        paymentId: event.data.paymentId,
        accountId: account,
        balanceCents: 1400,
      });
      assert.equal(await balanceOf(account), 1400);
      assert.equal((await creditsOf(event.data.paymentId)).length, 1);
    });

    test('20 messages in one turn commit in fewer transactions than 20, all credited', async () => {
      const account = newAccount();
      const events = Array.from({ length: 20 }, (_, i) => paymentEvent(account, (i + 1) * 10));
      const batches: number[] = [];
      const batching = await receiver({ observe: { onBatch: (consumer, size) => consumer === CONSUMER && batches.push(size) } });
      try {
        const responses = await Promise.all(events.map((event) => send(batching, event)));
        assert.deepEqual(
          responses.map((r) => r.statusCode),
          events.map(() => 201),
        );
      } finally {
        await batching.close();
      }
      // onBatch tells each transaction of more than one message; the others ran alone.
      const batched = batches.reduce((sum, size) => sum + size, 0);
      const transactions = batches.length + (events.length - batched);
      assert.ok(
        batches.some((size) => size > 1),
        `some transaction committed several messages (batches: ${JSON.stringify(batches)})`,
      );
      assert.ok(transactions < events.length, `${transactions} transactions for ${events.length} messages`);
      assert.equal(await balanceOf(account), 2100);
      const credited = await db.selectFrom('credits').select('payment_id').where('account_id', '=', account).execute();
      assert.equal(credited.length, 20);
    });

    test('the same key with another payload: 422, dead-lettered, balance unchanged', async () => {
      const account = newAccount();
      const event = paymentEvent(account, 900);
      assert.equal((await send(app, event)).statusCode, 201);
      const tampered = { ...event, data: { ...event.data, amountCents: 90_000 } };

      const reused = await send(app, tampered);

      assert.equal(reused.statusCode, 422);
      assert.match(String(reused.headers['content-type']), /^application\/problem\+json/);
      const problem = json<{ type: string; status: number; consumer: string; messageId: string }>(reused);
      assert.equal(problem.type, '/problems/idempotency-key-reused');
      assert.equal(problem.consumer, CONSUMER);
      assert.equal(problem.messageId, event.messageId);
      const letters = await db.selectFrom('dead_letters').selectAll().where('message_id', '=', event.messageId).execute();
      assert.equal(letters.length, 1);
      assert.equal(letters[0]!.consumer, CONSUMER);
      assert.equal(letters[0]!.reason, 'fingerprint-mismatch');
      assert.deepEqual(parsed(letters[0]!.payload), tampered.data);
      assert.equal(await balanceOf(account), 900);
      const credits = await creditsOf(event.data.paymentId);
      assert.equal(credits.length, 1);
      assert.equal(Number(credits[0]!.amount_cents), 900);
    });
  });
}
