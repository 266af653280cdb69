import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../src/app.js';
import { COMMAND_KINDS } from '../src/command-kinds.js';
import { formatOpenApi, OPENAPI_APP_OPTIONS, OPENAPI_FILE, openApiDocument } from '../scripts/write-openapi.js';
import { operations, type OpenApiDocument } from './support/openapi-doc.js';

/** The generated OpenAPI document: committed, complete, and saying what the service really answers. */

const COMMANDS = ['/inventory/order-placed', '/inventory/order-cancelled'];
const PROBLEM_REF = '#/components/schemas/ProblemDetails';

/**
 * Every (method, path) the router knows, read from printRoutes' tree: a node's path is its
 * ancestors' segments joined, and HEAD is left out because Fastify adds it to every GET.
 */
function registeredRoutes(app: FastifyInstance): { method: string; path: string }[] {
  const routes: { method: string; path: string }[] = [];
  const prefixes: string[] = [];
  for (const line of app.printRoutes({ commonPrefix: false }).split('\n')) {
    const match = /^((?:│ {3}| {4})*)(?:├── |└── )(.*?)(?: \(([A-Z, ]+)\))?$/.exec(line);
    if (match === null) continue;
    const depth = match[1]!.length / 4;
    prefixes.length = depth;
    const path = (prefixes[depth - 1] ?? '') + match[2]!;
    prefixes[depth] = path;
    for (const method of (match[3] ?? '').split(',').map((m) => m.trim())) {
      if (method !== '' && method !== 'HEAD') routes.push({ method, path });
    }
  }
  return routes;
}

/** `/stock/:bookId` as OpenAPI writes it: `/stock/{bookId}`. */
function openApiPath(path: string): string {
  return path.replace(/:([A-Za-z0-9_]+)/g, '{$1}');
}

function allRefs(value: unknown, out: string[] = []): string[] {
  if (Array.isArray(value)) for (const v of value) allRefs(v, out);
  else if (value !== null && typeof value === 'object') {
    for (const [key, v] of Object.entries(value)) {
      if (key === '$ref' && typeof v === 'string') out.push(v);
      else allRefs(v, out);
    }
  }
  return out;
}

describe('OpenAPI document', () => {
  let app: FastifyInstance;
  let doc: OpenApiDocument;

  before(async () => {
    app = await buildApp(OPENAPI_APP_OPTIONS);
    await app.ready();
    doc = openApiDocument(app) as OpenApiDocument;
  });
  after(async () => {
    await app?.close();
  });

  test('the committed openapi/openapi.json is what the routes generate now', async () => {
    const stale = 'openapi/openapi.json is out of date with the route schemas: run `npm run openapi` and commit the result';
    let text: string;
    try {
      text = await readFile(OPENAPI_FILE, 'utf8');
    } catch (error) {
      assert.fail(`${stale} (${(error as Error).message})`);
    }
    assert.deepEqual(JSON.parse(text), doc, stale);
    assert.equal(text, formatOpenApi(doc), `${stale} (same content, different formatting)`);
  });

  test('it is OpenAPI 3.1.0', () => {
    assert.equal(doc.openapi, '3.1.0');
    assert.equal(doc.info.title, 'Bookstore Inventory');
  });

  test('every operation has a summary and a tag declared at the top level', () => {
    const declared = new Set((doc.tags ?? []).map((t) => t.name));
    const ops = operations(doc);
    assert.ok(ops.length > 0);
    for (const { method, path, op } of ops) {
      const where = `${method.toUpperCase()} ${path}`;
      assert.ok(typeof op.summary === 'string' && op.summary.length > 0, `${where} has no summary`);
      assert.ok(Array.isArray(op.tags) && op.tags.length > 0, `${where} has no tag`);
      for (const tag of op.tags) assert.ok(declared.has(tag), `${where} uses undeclared tag ${tag}`);
    }
  });

  test('every operation has a unique operationId and declares its security; every parameter is described', () => {
    const ids = new Set<string>();
    for (const { method, path, op } of operations(doc)) {
      const where = `${method.toUpperCase()} ${path}`;
      assert.match(String(op.operationId), /^[a-z][A-Za-z0-9]*$/, `${where} has no camelCase operationId`);
      const id = String(op.operationId);
      assert.ok(!ids.has(id), `${where}: operationId ${id} is used twice`);
      ids.add(id);
      assert.ok(Array.isArray(op.security), `${where} declares no security (public routes say security: [])`);
      for (const param of op.parameters ?? []) {
        assert.ok(
          typeof param.description === 'string' && param.description.length > 0,
          `${where} parameter ${param.in} ${param.name} has no description`,
        );
        if (param.schema?.default !== undefined)
          assert.equal(param.required, false, `${where} parameter ${param.name} has a default, so it is optional`);
      }
    }
  });

  test('the admin routes take the bearer token; the document names its server and licence', () => {
    for (const path of ['/inbox', '/dead-letters']) assert.deepEqual(doc.paths[path]?.get?.security, [{ adminToken: [] }], path);
    assert.deepEqual(doc.paths['/stock']?.get?.security, []);
    assert.deepEqual(doc.servers, [{ url: '/', description: 'This service' }]);
    assert.deepEqual(doc.info.license, { name: 'MIT', identifier: 'MIT' });
  });

  test('every response has its own description: none is Fastify\'s "Default Response"', () => {
    for (const { method, path, op } of operations(doc)) {
      for (const [status, response] of Object.entries(op.responses ?? {})) {
        const where = `${method.toUpperCase()} ${path} ${status}`;
        assert.ok(response.description && response.description !== 'Default Response', `${where}: ${response.description}`);
      }
    }
  });

  test('each operation lists only the problems it can return', () => {
    const listed = (path: string, method: string, status: string) =>
      Object.keys(doc.paths[path]?.[method]?.responses?.[status]?.content?.['application/problem+json']?.examples ?? {});
    const setStock = '/stock/{bookId}';
    assert.deepEqual(listed(setStock, 'put', '400'), ['invalid-request', 'malformed-json']);
    assert.deepEqual(listed(setStock, 'put', '401'), ['unauthorized']);
    assert.deepEqual(listed(setStock, 'put', '409'), ['stock-below-reserved']);
    assert.deepEqual(listed('/inbox/prune', 'post', '503'), ['shutting-down', 'database-busy', 'overloaded', 'database-unavailable']);
    assert.deepEqual(listed('/health/ready', 'get', '503'), ['shutting-down', 'database-unavailable']);
    assert.deepEqual(listed('/inventory/order-placed', 'post', '401'), ['invalid-signature', 'producer-unauthenticated']);
    assert.deepEqual(listed('/inventory/order-placed', 'post', '409'), ['in-flight']);
    assert.deepEqual(listed('/notifications/stock-reserved-email', 'post', '409'), ['in-flight', 'needs-reconciliation']);
    assert.deepEqual(listed('/inbox/{consumer}/{messageId}/reconcile', 'post', '409'), ['not-in-progress', 'lease-not-expired']);
    // No admin route lists a command's key or signature problems, and no route but the email's an email problem.
    for (const { method, path, op } of operations(doc)) {
      const slugs = Object.values(op.responses ?? {}).flatMap((r) => Object.keys(r.content?.['application/problem+json']?.examples ?? {}));
      const where = `${method.toUpperCase()} ${path}`;
      if (!path.startsWith('/inventory/') && !path.startsWith('/notifications/')) {
        // A replay runs the letter's command under its key: a copy of it in flight is a real answer there.
        const commandProblems = path.endsWith('/replay')
          ? /message-key|invalid-signature|idempotency-key-reused/
          : /message-key|invalid-signature|in-flight|idempotency-key-reused/;
        assert.ok(!slugs.some((s) => commandProblems.test(s)), `${where}: ${slugs.join(', ')}`);
      }
      if (path !== '/notifications/stock-reserved-email')
        assert.ok(!slugs.some((s) => s.startsWith('email-')), `${where}: ${slugs.join(', ')}`);
    }
  });

  test('documented response headers are described', () => {
    for (const { method, path, op } of operations(doc)) {
      for (const [status, response] of Object.entries(op.responses ?? {})) {
        for (const [name, header] of Object.entries(response.headers ?? {})) {
          assert.ok(
            typeof header.description === 'string' && header.description.length > 0,
            `${method.toUpperCase()} ${path} ${status} header ${name}`,
          );
        }
      }
    }
    const placed = doc.paths['/inventory/order-placed']?.post?.responses;
    assert.ok(placed?.['409']?.headers?.['retry-after'], '409 documents Retry-After');
    assert.ok(placed['401']?.headers?.['www-authenticate'], '401 documents WWW-Authenticate');
    assert.ok(doc.paths['/health/ready']?.get?.responses?.['503']?.headers?.['retry-after'], '503 documents Retry-After');
  });

  test('a CloudEvent keeps its extension-attribute rule: no name outside [a-z0-9]{1,20}, no nested value', () => {
    const schema = doc.paths['/inventory/order-placed']?.post?.requestBody?.content['application/cloudevents+json']?.schema;
    assert.ok(schema, 'the CloudEvent body has a schema');
    assert.deepEqual(schema.propertyNames, { pattern: '^[a-z0-9]{1,20}$' });
    assert.deepEqual(schema.additionalProperties, { anyOf: [{ type: 'string' }, { type: 'integer' }, { type: 'boolean' }] });
  });

  test('every command kind of src/command-kinds.ts is a documented POST at its URL, and no other POST takes commands', () => {
    const commandRoutes = operations(doc)
      .filter(({ method, op }) => method === 'post' && op.security?.some((scheme) => 'producerApiKey' in scheme))
      .map(({ path }) => path);
    assert.deepEqual(commandRoutes.sort(), COMMAND_KINDS.map((k) => k.url).sort());
  });

  test('every route but /docs* is documented, and every documented operation is a route', () => {
    const routes = registeredRoutes(app).filter((r) => !r.path.startsWith('/docs'));
    assert.ok(
      routes.some((r) => r.method === 'POST' && r.path === '/inventory/order-placed'),
      'the route listing was read',
    );
    const documented = new Set(operations(doc).map(({ method, path }) => `${method.toUpperCase()} ${path}`));
    const registered = new Set(routes.map((r) => `${r.method} ${openApiPath(r.path)}`));
    assert.deepEqual(
      [...registered].filter((r) => !documented.has(r)),
      [],
      'routes missing from the document',
    );
    assert.deepEqual(
      [...documented].filter((d) => !registered.has(d)),
      [],
      'documented operations with no route',
    );
  });

  test('shared schemas are components by name, and every $ref resolves', () => {
    assert.ok(doc.components.schemas.ProblemDetails, 'ProblemDetails component');
    assert.ok(doc.components.schemas.Stock, 'Stock component');
    assert.doesNotMatch(JSON.stringify(doc), /def-\d+/, 'no anonymous def-N schema names');
    for (const ref of allRefs(doc)) {
      const name = /^#\/components\/schemas\/(.+)$/.exec(ref)?.[1];
      assert.ok(name !== undefined && doc.components.schemas[name] !== undefined, `unresolved $ref ${ref}`);
    }
    const stock = doc.paths['/stock/{bookId}']?.get?.responses?.['200']?.content?.['application/json']?.schema;
    assert.deepEqual(stock, { $ref: '#/components/schemas/Stock' });
  });

  test('every 4xx and 5xx response is application/problem+json with the ProblemDetails schema', () => {
    for (const { method, path, op } of operations(doc)) {
      for (const [status, response] of Object.entries(op.responses ?? {})) {
        if (Number(status) < 400) continue;
        const where = `${method.toUpperCase()} ${path} ${status}`;
        assert.deepEqual(Object.keys(response.content ?? {}), ['application/problem+json'], where);
        assert.deepEqual(response.content?.['application/problem+json']?.schema, { $ref: PROBLEM_REF }, where);
      }
    }
  });

  for (const path of COMMANDS) {
    test(`POST ${path} documents 201, 200, 400, 409, 413, 415, 422 and both JSON media types`, () => {
      const op = doc.paths[path]?.post;
      assert.ok(op, `POST ${path} is documented`);
      assert.deepEqual(op.tags, ['commands']);
      const responses = op.responses ?? {};
      for (const status of ['201', '200', '400', '409', '413', '415', '422']) {
        assert.ok(responses[status], `${status} is documented`);
      }
      for (const status of ['201', '200']) {
        assert.ok(responses[status]?.content?.['application/json']?.schema, `${status} has a JSON body`);
      }
      for (const status of ['400', '409', '413', '415', '422']) {
        assert.deepEqual(responses[status]?.content?.['application/problem+json']?.schema, { $ref: PROBLEM_REF }, status);
      }
      assert.ok(responses['200']?.headers?.['idempotent-replayed'], 'a replay documents Idempotent-Replayed');
      const media = Object.keys(op.requestBody?.content ?? {}).sort();
      assert.deepEqual(media, ['application/cloudevents+json', 'application/json']);
      const headerNames = (op.parameters ?? []).filter((p) => p.in === 'header').map((p) => p.name);
      assert.ok(headerNames.includes('idempotency-key'), 'the Idempotency-Key header is documented');
    });
  }

  test('GET /docs/json serves the same document', async () => {
    const res = await app.inject({ url: '/docs/json' });
    assert.equal(res.statusCode, 200);
    assert.match(String(res.headers['content-type']), /^application\/json/);
    assert.deepEqual(JSON.parse(res.body), doc);
  });

  test('GET /docs/ serves Swagger UI', async () => {
    const res = await app.inject({ url: '/docs/' });
    assert.equal(res.statusCode, 200);
    assert.match(String(res.headers['content-type']), /^text\/html/);
    assert.match(res.body, /swagger-ui/i);
    const bare = await app.inject({ url: '/docs' });
    assert.ok(bare.statusCode === 200 || (bare.statusCode >= 300 && bare.statusCode < 400), `/docs answered ${bare.statusCode}`);
  });
});
