import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { guideSnippets, type Snippet } from '../support/guide-snippets.js';
import {
  bookstoreNamesIn,
  installApplication,
  LIBRARY_DIR,
  packLibrary,
  pinnedVersion,
  readManifest,
  REPOSITORY,
  removeDirectory,
  runScript,
  temporaryDirectory,
  typeCheck,
  type Diagnostic,
  type PackedLibrary,
} from '../support/inbox-library.js';

/**
 * What an adopter does with the inbox library: `npm pack` (packages/inbox), then in a new directory
 * outside the repository an application of its own installs the tarball beside fastify, kysely, typebox,
 * amqplib and PGlite from the npm registry (the cache first), type-checks its TypeScript against the
 * package's published declarations, and runs: a Fastify application with Fastify's default options, one
 * transactional command on PGlite, a command sent twice (201, then 200 with the same outcome), the rows
 * read back. In the same application, every TypeScript snippet of docs/inbox.md is a file of guide/,
 * type-checked with it, and the snippets marked `run` are run. Bounded: each npm, tsc and node call has
 * its own timeout.
 */

const GUIDE = 'docs/inbox.md';
const snippets = guideSnippets(readFileSync(join(REPOSITORY, GUIDE), 'utf8'));

/** Where a diagnostic in guide/<file> is in the guide itself. */
function inGuide(snippet: Snippet, line: number): string {
  return `${GUIDE}:${snippet.line + line - 1} (${snippet.file})`;
}

/** The adopter's application: everything it imports is a package. Prints what it observed as one JSON line. */
const APPLICATION = `
import { PGlite } from '@electric-sql/pglite';
import Fastify from 'fastify';
import { Kysely, PGliteDialect, type Generated } from 'kysely';
import { Migrator, type Migration } from 'kysely/migration';
import { Type } from 'typebox';
import { inboxMigrations, type InboxTables, type TransactionalKind } from 'bookstore-inventory/inbox';
import { inbox } from 'bookstore-inventory/inbox/fastify';
import { AMQP_CONSUMER_DEFAULTS, CommandConsumer } from 'bookstore-inventory/inbox/amqp';

interface LabelsTable {
  id: Generated<number>;
  shipment_id: string;
  parcels: number;
  message_id: string;
}
interface Database extends InboxTables {
  labels: LabelsTable;
}

const CreateLabel = Type.Object(
  { shipmentId: Type.String({ minLength: 1 }), parcels: Type.Integer({ minimum: 1, maximum: 20 }) },
  { additionalProperties: false },
);
const LabelCreated = Type.Object({ labelId: Type.Integer(), shipmentId: Type.String(), parcels: Type.Integer() });

const createLabel: TransactionalKind<typeof CreateLabel, typeof LabelCreated, Database> = {
  kind: 'transaction',
  consumer: 'shipping.create-label',
  name: 'CreateLabel',
  data: CreateLabel,
  outcome: LabelCreated,
  run: async (trx, { data, key }) => {
    const row = await trx
      .insertInto('labels')
      .values({ shipment_id: data.shipmentId, parcels: data.parcels, message_id: key.messageId })
      .returning('id')
      .executeTakeFirstOrThrow();
    return { labelId: row.id, shipmentId: data.shipmentId, parcels: data.parcels };
  },
};

const migrations: Record<string, Migration> = {
  ...inboxMigrations,
  '0001-labels': {
    up: async (db) => {
      await db.schema
        .createTable('labels')
        .addColumn('id', 'serial', (c) => c.primaryKey())
        .addColumn('shipment_id', 'text', (c) => c.notNull())
        .addColumn('parcels', 'integer', (c) => c.notNull())
        .addColumn('message_id', 'text', (c) => c.notNull())
        .execute();
    },
  },
};

const db = new Kysely<Database>({ dialect: new PGliteDialect({ pglite: new PGlite() }) });
const { error } = await new Migrator({ db, provider: { getMigrations: async () => migrations } }).migrateToLatest();
if (error !== undefined) throw error;

const app = Fastify();
await app.register(inbox, { db, batch: { concurrency: 1 } });
app.inbox.command(createLabel, { url: '/labels' });

const command = { messageId: 'shipment-7-label', data: { shipmentId: 'shipment-7', parcels: 2 } };
const first = await app.inject({ method: 'POST', url: '/labels', payload: command });
const second = await app.inject({ method: 'POST', url: '/labels', payload: command });
const coerced = await app.inject({
  method: 'POST',
  url: '/labels',
  payload: { messageId: 'shipment-7-label', data: { shipmentId: 'shipment-7', parcels: '2' } },
});
const answer = (response: typeof first) => ({
  status: response.statusCode,
  replayed: response.headers['idempotent-replayed'] ?? null,
  body: response.json(),
});
console.log(
  JSON.stringify({
    first: answer(first),
    second: answer(second),
    coerced: answer(coerced),
    labels: await db.selectFrom('labels').select(['shipment_id', 'parcels', 'message_id']).execute(),
    inbox: await db.selectFrom('inbox').select(['message_id', 'consumer', 'completed_at']).execute(),
    amqp: { consumer: typeof CommandConsumer, deadLetterExchange: AMQP_CONSUMER_DEFAULTS.deadLetterExchange },
  }),
);
await app.close();
await db.destroy();
`;

/** Wrong uses the published types must refuse: proof that they are the library's types, not `any`. */
const MISUSE = `
import { Type } from 'typebox';
import type { TransactionalKind } from 'bookstore-inventory/inbox';

const Data = Type.Object({ parcels: Type.Integer() });
const Outcome = Type.Object({ labelId: Type.Integer() });

export const outcomeOfAnotherShape: TransactionalKind<typeof Data, typeof Outcome> = {
  kind: 'transaction',
  consumer: 'c',
  name: 'N',
  data: Data,
  outcome: Outcome,
  run: async () => ({ labelId: 'not a number' }),
};

export const notAKind: TransactionalKind<typeof Data, typeof Outcome> = {
  kind: 'sometimes',
  consumer: 'c',
  name: 'N',
  data: Data,
  outcome: Outcome,
  run: async () => ({ labelId: 1 }),
};
`;

/** Every copy of a package in the application's node_modules (its directories). */
function copiesOf(dir: string, name: string): string[] {
  return readdirSync(join(dir, 'node_modules'), { recursive: true, encoding: 'utf8' })
    .filter((path) => path === name || path.endsWith(`/node_modules/${name}`))
    .filter((path) => {
      try {
        return (JSON.parse(readFileSync(join(dir, 'node_modules', path, 'package.json'), 'utf8')) as { name?: string }).name === name;
      } catch {
        return false;
      }
    });
}

let work: string;
let app: string;
let packed: PackedLibrary;
/** tsc's diagnostics over the whole application (app.ts, misuse.ts, guide/*.ts), once. */
let diagnostics: Promise<Diagnostic[]> | undefined;
const typeChecked = () => (diagnostics ??= typeCheck(app));

before(async () => {
  work = await temporaryDirectory('inbox-package-');
  packed = await packLibrary(work);
  app = join(work, 'app');
  await mkdir(join(app, 'guide'), { recursive: true });
  await writeFile(join(app, 'app.ts'), APPLICATION);
  await writeFile(join(app, 'misuse.ts'), MISUSE);
  for (const snippet of snippets) await writeFile(join(app, 'guide', snippet.file), snippet.code);
  const packages = ['fastify', 'kysely', 'typebox', 'amqplib', '@electric-sql/pglite', '@types/node'];
  await installApplication(app, packed.tarball, packages, ['app.ts', 'misuse.ts', ...snippets.map((snippet) => `guide/${snippet.file}`)]);
});
after(async () => {
  await removeDirectory(work);
});

describe('the packed inbox library, installed by an application outside the repository', () => {
  test('the tarball: a version, its compiled entries with their declarations, a changelog, no sources and no bookstore', () => {
    const manifest = readManifest(LIBRARY_DIR);
    assert.equal(packed.name, 'bookstore-inventory');
    assert.match(packed.version, /^\d+\.\d+\.\d+$/);
    assert.equal(packed.version, manifest.version);
    for (const file of [
      'package.json',
      'README.md',
      'CHANGELOG.md',
      'LICENSE',
      'dist/inbox/index.js',
      'dist/inbox/index.d.ts',
      'dist/inbox/machinery.js',
      'dist/inbox/machinery.d.ts',
      'dist/adapters/fastify/index.js',
      'dist/adapters/fastify/index.d.ts',
      'dist/adapters/amqp/index.js',
      'dist/adapters/amqp/index.d.ts',
    ]) {
      assert.ok(packed.files.includes(file), `${file} is not in the tarball`);
    }
    assert.deepEqual(
      packed.files.filter((file) => /\.ts$/.test(file) && !file.endsWith('.d.ts')),
      [],
      'TypeScript sources in the tarball',
    );
    assert.deepEqual(
      packed.files.filter((file) => !/^(package\.json|README\.md|CHANGELOG\.md|LICENSE|dist\/.+\.(js|d\.ts))$/.test(file)),
      [],
      'files beyond the library',
    );
    assert.match(
      readFileSync(join(LIBRARY_DIR, 'CHANGELOG.md'), 'utf8'),
      new RegExp(`^## ${packed.version.replaceAll('.', '\\.')}\\b`, 'm'),
    );
    const installed = join(app, 'node_modules/bookstore-inventory');
    const named = packed.files
      .filter((file) => file.startsWith('dist/'))
      .flatMap((file) => bookstoreNamesIn(readFileSync(join(installed, file), 'utf8')).map((line) => `${file} ${line}`));
    assert.deepEqual(named, [], 'bookstore names in the library files');
  });

  test('the manifest: not private, fastify/kysely/typebox/amqplib as peers from the versions tested, amqplib optional', () => {
    const manifest = JSON.parse(readFileSync(join(app, 'node_modules/bookstore-inventory/package.json'), 'utf8')) as {
      private?: boolean;
      peerDependencies: Record<string, string>;
      peerDependenciesMeta: Record<string, { optional?: boolean }>;
      dependencies: Record<string, string>;
      exports: Record<string, unknown>;
    };
    assert.equal(manifest.private, undefined);
    assert.deepEqual(Object.keys(manifest.exports).sort(), [
      './inbox',
      './inbox/amqp',
      './inbox/fastify',
      './inbox/machinery',
      './package.json',
    ]);
    for (const peer of ['fastify', 'kysely', 'typebox', 'amqplib']) {
      assert.equal(manifest.peerDependencies[peer], `^${pinnedVersion(peer)}`, peer);
      assert.equal(manifest.dependencies[peer], undefined, `${peer} is a peer, not a dependency`);
    }
    assert.deepEqual(manifest.peerDependenciesMeta, { amqplib: { optional: true } });
  });

  test('one copy each of fastify, kysely and typebox: the application shares its own with the library', () => {
    for (const name of ['fastify', 'kysely', 'typebox']) assert.deepEqual(copiesOf(app, name), [name], name);
  });

  test("the application type-checks against the package's declarations, which refuse a wrong kind", async () => {
    const found = await typeChecked();
    assert.deepEqual(
      found.filter((d) => d.file === 'app.ts'),
      [],
      'app.ts type-checks',
    );
    const misuse = found.filter((d) => d.file === 'misuse.ts');
    const lines = MISUSE.split('\n');
    const lineOf = (text: string) => lines.findIndex((line) => line.includes(text)) + 1;
    assert.ok(
      misuse.some((d) => d.line === lineOf("labelId: 'not a number'")),
      `an outcome of another shape is refused: ${JSON.stringify(misuse)}`,
    );
    assert.ok(
      misuse.some((d) => d.line === lineOf("kind: 'sometimes'")),
      `an unknown kind of work is refused: ${JSON.stringify(misuse)}`,
    );
  });

  test('the application runs: 201, then 200 with the same outcome; a coerced copy is a 400; one label row', async () => {
    const { code, stdout, stderr } = await runScript(app, 'app.ts', { timeoutMs: 120_000 });
    assert.equal(code, 0, stderr);
    const seen = JSON.parse(stdout.trim().split('\n').at(-1)!) as {
      first: { status: number; replayed: string | null; body: { status: string; outcome: unknown } };
      second: { status: number; replayed: string | null; body: { status: string; outcome: unknown } };
      coerced: { status: number; body: { type: string } };
      labels: unknown[];
      inbox: { message_id: string; consumer: string; completed_at: string | null }[];
      amqp: { consumer: string; deadLetterExchange: string };
    };
    assert.equal(seen.first.status, 201);
    assert.equal(seen.first.body.status, 'processed');
    assert.deepEqual(seen.first.body.outcome, { labelId: 1, shipmentId: 'shipment-7', parcels: 2 });
    assert.equal(seen.second.status, 200);
    assert.equal(seen.second.replayed, 'true');
    assert.equal(seen.second.body.status, 'duplicate');
    assert.deepEqual(seen.second.body.outcome, seen.first.body.outcome);
    assert.equal(seen.coerced.status, 400);
    assert.equal(seen.coerced.body.type, '/problems/invalid-request');
    assert.deepEqual(seen.labels, [{ shipment_id: 'shipment-7', parcels: 2, message_id: 'shipment-7-label' }]);
    assert.equal(seen.inbox.length, 1);
    assert.equal(seen.inbox[0]!.message_id, 'shipment-7-label');
    assert.equal(seen.inbox[0]!.consumer, 'shipping.create-label');
    assert.notEqual(seen.inbox[0]!.completed_at, null);
    assert.deepEqual(seen.amqp, { consumer: 'function', deadLetterExchange: 'commands.dead-letter' });
  });
});

describe(`the TypeScript snippets of ${GUIDE}, as files of that application`, () => {
  test('the guide has snippets, one of them to run', () => {
    assert.ok(snippets.length >= 3, `${snippets.length} snippets`);
    assert.ok(snippets.some((snippet) => snippet.run));
  });

  test("every snippet type-checks against the package's declarations", async () => {
    const found = (await typeChecked()).filter((d) => d.file.startsWith('guide/'));
    const described = found.map((d) => {
      const snippet = snippets.find((s) => `guide/${s.file}` === d.file)!;
      return `${inGuide(snippet, d.line)}: ${d.code} ${d.message}`;
    });
    assert.deepEqual(described, []);
  });

  for (const snippet of snippets.filter((s) => s.run)) {
    test(`${snippet.file} runs to its end (${GUIDE}:${snippet.line})`, async () => {
      const { code, stdout, stderr } = await runScript(join(app, 'guide'), snippet.file, { tsx: true, timeoutMs: 120_000 });
      assert.equal(code, 0, `${stderr}\n${stdout}`);
    });
  }
});
