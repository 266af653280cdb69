import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { buildApp } from '../src/app.js';
import { EXAMPLE_BOOK_ID } from '../src/http/openapi-examples.js';
import { OPENAPI_APP_OPTIONS, openApiDocument } from '../scripts/write-openapi.js';
import { testDatabases } from './support/databases.js';
import {
  admin,
  json,
  testApp,
  type CommandAnswer,
  type DeadLetter,
  type OrderPlaced,
  type Problem,
  type Stock,
} from './support/fixtures.js';
import { examplePath, operations, publishedValidator, requestExamples, type OpenApiDocument } from './support/openapi-doc.js';

/**
 * The document's examples are a walkthrough a person follows in Swagger UI: each one must match the
 * published schema, and, sent as it is in document order to a fresh service, get the status the document
 * promises (201 the first time; a copy of a command is a 200 replay).
 */

/** Operations whose examples cannot succeed on a healthy service, and the status they are documented with. */
const EXPECTED_FIRST_STATUS: Record<string, { status: number; why: string }> = {
  reconcileInboxRecord: { status: 409, why: 'nothing is in progress: the example record was completed, so it is not-in-progress' },
  replayDeadLetterGroup: { status: 200, why: 'a fresh service has no such group: nothing done, nothing remaining' },
  discardDeadLetterGroup: { status: 200, why: 'a fresh service has no such group: nothing done, nothing remaining' },
};

let doc: OpenApiDocument;
let validate: ReturnType<typeof publishedValidator>;

before(async () => {
  const app = await buildApp(OPENAPI_APP_OPTIONS);
  await app.ready();
  doc = openApiDocument(app) as OpenApiDocument;
  await app.close();
  validate = publishedValidator(doc);
});

function mediaPointer(path: string, method: string, where: string[], mediaType: string): string[] {
  return ['paths', path, method, ...where, 'content', mediaType, 'schema'];
}

describe('OpenAPI examples', () => {
  test('every request body media type has named examples, and every example matches its published schema', () => {
    let checked = 0;
    for (const { method, path, op } of operations(doc)) {
      const where = `${method.toUpperCase()} ${path}`;
      for (const [mediaType, media] of Object.entries(op.requestBody?.content ?? {})) {
        assert.ok(Object.keys(media.examples ?? {}).length > 0, `${where} ${mediaType} has no named example`);
        for (const [name, example] of Object.entries(media.examples ?? {})) {
          assert.ok(typeof example.summary === 'string' && example.summary !== '', `${where} ${mediaType} example ${name} has no summary`);
          assert.deepEqual(
            validate(mediaPointer(path, method, ['requestBody'], mediaType), example.value),
            [],
            `${where} ${mediaType} example ${name}`,
          );
          checked += 1;
        }
      }
      for (const [status, response] of Object.entries(op.responses ?? {})) {
        for (const [mediaType, media] of Object.entries(response.content ?? {})) {
          for (const [name, example] of Object.entries(media.examples ?? {})) {
            assert.deepEqual(
              validate(mediaPointer(path, method, ['responses', status], mediaType), example.value),
              [],
              `${where} ${status} example ${name}`,
            );
            if (Number(status) >= 400)
              assert.equal((example.value as Problem).status, Number(status), `${where} ${status} example ${name}: its status`);
            checked += 1;
          }
        }
      }
      for (const [i, param] of (op.parameters ?? []).entries()) {
        if (param.example === undefined) continue;
        assert.deepEqual(
          validate(['paths', path, method, 'parameters', String(i), 'schema'], param.example),
          [],
          `${where} parameter ${param.name}`,
        );
        checked += 1;
      }
    }
    assert.ok(checked > 30, `only ${checked} examples found`);
  });

  test('every problem response has one example per problem type, with its own type and status', () => {
    for (const { method, path, op } of operations(doc)) {
      for (const [status, response] of Object.entries(op.responses ?? {})) {
        if (Number(status) < 400) continue;
        const examples = Object.values(response.content?.['application/problem+json']?.examples ?? {});
        assert.ok(examples.length > 0, `${method.toUpperCase()} ${path} ${status} has no example`);
        const types = examples.map((e) => (e.value as Problem).type);
        assert.equal(new Set(types).size, types.length, `${method.toUpperCase()} ${path} ${status}: one example per type`);
      }
    }
  });

  test('commands document the processed (201) and duplicate (200) results', () => {
    for (const { method, path, op } of operations(doc)) {
      if (!op.tags?.includes('commands')) continue;
      const first = Object.values(op.responses?.['201']?.content?.['application/json']?.examples ?? {});
      const replay = Object.values(op.responses?.['200']?.content?.['application/json']?.examples ?? {});
      assert.deepEqual(
        first.map((e) => (e.value as CommandAnswer).status),
        ['processed'],
        `${method} ${path} 201`,
      );
      assert.deepEqual(
        replay.map((e) => (e.value as CommandAnswer).status),
        ['duplicate'],
        `${method} ${path} 200`,
      );
    }
  });
});

for (const database of testDatabases) {
  describe(`OpenAPI examples sent to a fresh service on ${database.name}`, () => {
    let handle: Awaited<ReturnType<typeof database.open>>;
    let app: FastifyInstance;
    let emailDir: string;

    before(async () => {
      handle = await database.open();
      emailDir = await mkdtemp(join(tmpdir(), 'bookstore-examples-'));
      app = await testApp(handle, { config: { emailProvider: 'log', emailLogFile: join(emailDir, 'emails.jsonl') } });
    });
    after(async () => {
      await app?.close();
      await handle?.close();
      await rm(emailDir, { recursive: true, force: true });
    });

    function send(
      method: string,
      url: string,
      mediaType: string,
      value: unknown,
      headers: Record<string, string>,
      secured: boolean,
    ): Promise<LightMyRequestResponse> {
      return app.inject({
        method: method.toUpperCase() as 'POST',
        url,
        headers: { 'content-type': mediaType, ...headers, ...(secured ? admin : {}) },
        payload: JSON.stringify(value),
      });
    }

    function assertMatchesDocument(where: string, path: string, method: string, res: LightMyRequestResponse): void {
      const status = String(res.statusCode);
      const response = doc.paths[path]?.[method]?.responses?.[status];
      assert.ok(response, `${where}: ${status} is not a documented answer (${res.body})`);
      const mediaType = String(res.headers['content-type']).split(';')[0]!;
      assert.ok(response.content?.[mediaType], `${where}: ${status} ${mediaType} is not documented`);
      assert.deepEqual(
        validate(mediaPointer(path, method, ['responses', status], mediaType), JSON.parse(res.body)),
        [],
        `${where}: the answer matches the document`,
      );
    }

    test('each request example, in document order, gets its documented status; a command sent again is a replay', async () => {
      const sent: string[] = [];
      for (const { method, path, op } of operations(doc)) {
        const examples = requestExamples(op);
        if (examples.length === 0) continue;
        const url = examplePath(path, op);
        const secured = (op.security ?? []).length > 0;
        const expected = EXPECTED_FIRST_STATUS[op.operationId ?? '']?.status ?? 201;
        for (const example of examples) {
          const where = `${method.toUpperCase()} ${path} example ${example.name} (${example.mediaType})`;
          const first = await send(method, url, example.mediaType, example.value, example.headers, secured);
          assert.equal(first.statusCode, expected, `${where}: ${first.body}`);
          assertMatchesDocument(where, path, method, first);
          if (op.tags?.includes('commands')) {
            const again = await send(method, url, example.mediaType, example.value, example.headers, secured);
            assert.equal(again.statusCode, 200, `${where} sent again: ${again.body}`);
            assert.equal(again.headers['idempotent-replayed'], 'true');
            assert.deepEqual(
              { ...json<CommandAnswer>(again), status: 'processed' },
              json(first),
              `${where}: the replay is the first outcome`,
            );
            assertMatchesDocument(`${where} sent again`, path, method, again);
            assert.equal(json<CommandAnswer>(first).outcome.result === 'unknown-book', false, `${where}: the example book exists`);
          }
          sent.push(where);
        }
      }
      assert.ok(sent.length >= 10, `only ${sent.length} examples were sent`);

      // The walkthrough as the examples describe it: 6 copies reserved, 3 released again by the cancellations.
      const stock = await app.inject({ url: `/stock/${EXAMPLE_BOOK_ID}` });
      assert.deepEqual(
        { ...json<Stock>(stock), updatedAt: undefined },
        {
          bookId: EXAMPLE_BOOK_ID,
          title: 'Dune',
          onHand: 10,
          reserved: 3,
          available: 7,
          updatedAt: undefined,
        },
      );
    });

    test('the server and the published schema agree on a property the schema does not name (what Swagger UI invents)', async () => {
      for (const { method, path, op } of operations(doc)) {
        for (const example of requestExamples(op)) {
          if (example.value === null || typeof example.value !== 'object' || Array.isArray(example.value)) continue;
          const where = `${method.toUpperCase()} ${path} example ${example.name} (${example.mediaType}) + additionalProp1`;
          const value = { ...example.value, additionalProp1: 'string' };
          const publishedErrors = validate(mediaPointer(path, method, ['requestBody'], example.mediaType), value);
          const res = await send(method, examplePath(path, op), example.mediaType, value, example.headers, (op.security ?? []).length > 0);
          const refused = res.statusCode === 400;
          assert.equal(
            publishedErrors.length > 0,
            refused,
            `${where}: published ${publishedErrors.length > 0 ? 'refuses' : 'accepts'}, the server answered ${res.statusCode} ${res.body}`,
          );
        }
      }
    });

    test('the envelope example with another quantity is a 422 that links its dead letter', async () => {
      const envelope = doc.paths['/inventory/order-placed']?.post?.requestBody?.content['application/json']?.examples?.envelope
        ?.value as OrderPlaced;
      assert.ok(envelope, 'the envelope example is documented');
      const res = await send(
        'post',
        '/inventory/order-placed',
        'application/json',
        { ...envelope, data: { ...envelope.data, quantity: 3 } },
        {},
        false,
      );
      assert.equal(res.statusCode, 422, res.body);
      const body = json<Problem>(res);
      assert.equal(body.type, '/problems/idempotency-key-reused');
      assertMatchesDocument('422', '/inventory/order-placed', 'post', res);
      const letter = await app.inject({ url: String(body.deadLetter), headers: admin });
      assert.equal(letter.statusCode, 200, letter.body);
      assert.equal(json<DeadLetter>(letter).messageId, envelope.messageId);
    });
  });
}
