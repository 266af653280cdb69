import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { PGlite } from '@electric-sql/pglite';
import Fastify, { type FastifyInstance, type FastifyServerOptions } from 'fastify';
import { Kysely, PGliteDialect } from 'kysely';
import { Migrator } from 'kysely/migration';
import { Type } from 'typebox';
import { inbox } from '../../src/adapters/fastify/index.js';
import { inboxMigrations, type InboxTables, type TransactionalKind } from '../../src/inbox/index.js';

/**
 * The Fastify plugin validates its command routes with its own settings, whatever the application gave
 * Fastify's Ajv: a body is checked as sent. With Fastify's defaults (coerceTypes, removeAdditional) a copy
 * carrying `"parcels": "2"` or an extra field used to be coerced or stripped into the first payload and
 * answered as its duplicate (200); it is a 400 invalid-request, and nothing is recorded. The application's
 * own routes keep the application's settings.
 */

interface LabelsTable {
  message_id: string;
  shipment_id: string;
  parcels: number;
}
interface Database extends InboxTables {
  labels: LabelsTable;
}

const CreateLabel = Type.Object(
  { shipmentId: Type.String({ minLength: 1 }), parcels: Type.Integer({ minimum: 1 }) },
  { additionalProperties: false },
);
const LabelCreated = Type.Object({ shipmentId: Type.String(), parcels: Type.Integer() });

/** A kind without normalize: the data is fingerprinted and applied as validated. */
const createLabel: TransactionalKind<typeof CreateLabel, typeof LabelCreated, Database> = {
  kind: 'transaction',
  consumer: 'shipping.create-label',
  name: 'CreateLabel',
  data: CreateLabel,
  outcome: LabelCreated,
  run: async (trx, { data, key }) => {
    await trx.insertInto('labels').values({ message_id: key.messageId, shipment_id: data.shipmentId, parcels: data.parcels }).execute();
    return { shipmentId: data.shipmentId, parcels: data.parcels };
  },
};

const migrations = {
  ...inboxMigrations,
  '0001-labels': {
    up: async (db: Kysely<unknown>) => {
      await db.schema
        .createTable('labels')
        .addColumn('message_id', 'text', (c) => c.primaryKey())
        .addColumn('shipment_id', 'text', (c) => c.notNull())
        .addColumn('parcels', 'integer', (c) => c.notNull())
        .execute();
    },
  },
};

describe('the Fastify plugin validates command bodies as sent, whatever Fastify was given', () => {
  let db: Kysely<Database>;
  before(async () => {
    db = new Kysely<Database>({ dialect: new PGliteDialect({ pglite: new PGlite() }) });
    const { error } = await new Migrator({ db, provider: { getMigrations: async () => migrations } }).migrateToLatest();
    if (error !== undefined) throw new Error('the migrations failed', { cause: error });
  });
  after(async () => {
    await db?.destroy();
  });

  /** An application with the given Fastify options, the inbox, one command route, and one route of its own. */
  async function application(options: FastifyServerOptions): Promise<FastifyInstance> {
    const app = Fastify(options);
    await app.register(inbox, { db, batch: { concurrency: 1 } });
    app.inbox.command(createLabel, { url: '/labels' });
    app.post(
      '/echo',
      { schema: { body: { type: 'object', properties: { n: { type: 'integer' } }, additionalProperties: false } } },
      (request) => ({
        body: request.body,
      }),
    );
    await app.ready();
    return app;
  }

  const rowsOf = async (messageId: string) => ({
    labels: await db.selectFrom('labels').selectAll().where('message_id', '=', messageId).execute(),
    inbox: await db.selectFrom('inbox').select(['message_id', 'fingerprint']).where('message_id', '=', messageId).execute(),
    deadLetters: await db.selectFrom('dead_letters').select('id').where('message_id', '=', messageId).execute(),
  });

  const applications: [string, FastifyServerOptions][] = [
    ["Fastify's default Ajv options", {}],
    ['an application that asks for coercion and stripping', { ajv: { customOptions: { coerceTypes: 'array', removeAdditional: 'all' } } }],
  ];
  for (const [name, options] of applications) {
    test(`${name}: a copy with "parcels": "2" or an extra field is a 400, not a duplicate`, async () => {
      const app = await application(options);
      try {
        const messageId = `label-${randomUUID()}`;
        const send = (data: unknown) => app.inject({ method: 'POST', url: '/labels', payload: { messageId, data } });

        const first = await send({ shipmentId: 's-1', parcels: 2 });
        assert.equal(first.statusCode, 201, first.body);
        const recorded = await rowsOf(messageId);

        for (const copy of [
          { shipmentId: 's-1', parcels: '2' },
          { shipmentId: 's-1', parcels: 2, signature: 'extra' },
        ]) {
          const answer = await send(copy);
          assert.equal(answer.statusCode, 400, `${JSON.stringify(copy)}: ${answer.body}`);
          assert.equal(answer.headers['content-type'], 'application/problem+json; charset=utf-8');
          assert.equal(answer.json<{ type: string }>().type, '/problems/invalid-request');
          assert.equal(answer.headers['idempotent-replayed'], undefined);
        }
        assert.match((await send({ shipmentId: 's-1', parcels: '2' })).json<{ detail: string }>().detail, /parcels must be integer/);
        assert.match(
          (await send({ shipmentId: 's-1', parcels: 2, signature: 'x' })).json<{ detail: string }>().detail,
          /body\/data must NOT have additional properties/,
        );
        assert.deepEqual(await rowsOf(messageId), recorded, 'the refused copies recorded nothing');
        assert.equal(recorded.labels.length, 1);

        const coercedNew = `label-${randomUUID()}`;
        const refused = await app.inject({
          method: 'POST',
          url: '/labels',
          payload: { messageId: coercedNew, data: { shipmentId: 's-2', parcels: '3' } },
        });
        assert.equal(refused.statusCode, 400);
        assert.deepEqual(await rowsOf(coercedNew), { labels: [], inbox: [], deadLetters: [] });

        const replay = await send({ shipmentId: 's-1', parcels: 2 });
        assert.equal(replay.statusCode, 200);
        assert.equal(replay.headers['idempotent-replayed'], 'true');
        assert.deepEqual(replay.json<{ outcome: unknown }>().outcome, { shipmentId: 's-1', parcels: 2 });
      } finally {
        await app.close();
      }
    });
  }

  test("the application's own routes keep the application's Ajv options", async () => {
    const app = await application({});
    try {
      const echo = await app.inject({ method: 'POST', url: '/echo', payload: { n: '2', extra: true } });
      assert.equal(echo.statusCode, 200, echo.body);
      assert.deepEqual(echo.json(), { body: { n: 2 } }, "Fastify's defaults coerce and strip on the application's route");
    } finally {
      await app.close();
    }
  });

  test('a command schema may refer to a schema the application added (app.addSchema)', async () => {
    const app = Fastify();
    app.addSchema({ $id: 'Parcels', type: 'integer', minimum: 1 });
    await app.register(inbox, { db, batch: { concurrency: 1 } });
    const Data = Type.Object(
      { shipmentId: Type.String(), parcels: Type.Unsafe<number>({ $ref: 'Parcels#' }) },
      { additionalProperties: false },
    );
    app.inbox.command(
      { ...createLabel, consumer: 'shipping.create-label-ref', data: Data },
      {
        url: '/labels-ref',
      },
    );
    try {
      await app.ready();
      const send = (parcels: unknown) =>
        app.inject({
          method: 'POST',
          url: '/labels-ref',
          payload: { messageId: `ref-${randomUUID()}`, data: { shipmentId: 's-3', parcels } },
        });
      assert.equal((await send(0)).statusCode, 400, 'minimum 1, from the shared schema');
      assert.equal((await send('4')).statusCode, 400, 'not coerced');
      assert.equal((await send(4)).statusCode, 201);
    } finally {
      await app.close();
    }
  });
});
