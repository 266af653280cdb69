import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { gunzipSync } from 'node:zlib';

/**
 * The service as deployed, configured by OTEL_* variables alone, sends its spans over OTLP/HTTP to a
 * receiver on loopback the way a collector (or Jaeger) receives them: POST /v1/traces, JSON bodies
 * (ExportTraceServiceRequest). The spans of one order arrive with the sender's trace id, the service's
 * name and the inbox's attributes; and with no OTEL_* variable the same service sends nothing.
 */

const serverEntry = fileURLToPath(new URL('../../src/server.ts', import.meta.url));

interface AnyValue {
  stringValue?: string;
  intValue?: number | string;
  boolValue?: boolean;
}
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes?: { key: string; value: AnyValue }[];
  links?: { traceId: string; spanId: string }[];
}
interface ExportRequest {
  resourceSpans?: {
    resource?: { attributes?: { key: string; value: AnyValue }[] };
    scopeSpans?: { scope?: { name?: string }; spans?: OtlpSpan[] }[];
  }[];
}

/** A collector's OTLP/HTTP endpoint, on loopback: keeps every export request it is sent. */
class OtlpReceiver {
  readonly requests: { path: string; contentType: string; body: ExportRequest }[] = [];
  private constructor(readonly server: Server) {}

  static async start(): Promise<OtlpReceiver> {
    const receiver: OtlpReceiver = new OtlpReceiver(createServer((req, res) => void receiver.receive(req, res)));
    receiver.server.listen(0, '127.0.0.1');
    await once(receiver.server, 'listening');
    return receiver;
  }

  get url(): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  private async receive(req: IncomingMessage, res: import('node:http').ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    let raw = Buffer.concat(chunks);
    if (req.headers['content-encoding'] === 'gzip') raw = gunzipSync(raw);
    const contentType = req.headers['content-type'] ?? '';
    if (req.method !== 'POST' || !contentType.startsWith('application/json')) {
      res.writeHead(415, { 'content-type': 'application/json' }).end('{}');
      return;
    }
    this.requests.push({ path: req.url ?? '', contentType, body: JSON.parse(raw.toString('utf8')) as ExportRequest });
    res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
  }

  spans(): { span: OtlpSpan; resource: Record<string, unknown> }[] {
    return this.requests.flatMap(({ body }) =>
      (body.resourceSpans ?? []).flatMap((rs) => {
        const resource = attributesOf(rs.resource?.attributes);
        return (rs.scopeSpans ?? []).flatMap((ss) => (ss.spans ?? []).map((span) => ({ span, resource })));
      }),
    );
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

function valueOf(value: AnyValue): unknown {
  if (value.stringValue !== undefined) return value.stringValue;
  if (value.intValue !== undefined) return Number(value.intValue);
  if (value.boolValue !== undefined) return value.boolValue;
  return value;
}

function attributesOf(list: { key: string; value: AnyValue }[] | undefined): Record<string, unknown> {
  return Object.fromEntries((list ?? []).map(({ key, value }) => [key, valueOf(value)]));
}

/** OTLP/JSON ids are hex; a base64 id (protobuf's JSON mapping) is read as such. */
function hexId(id: string, bytes: number): string {
  return new RegExp(`^[0-9a-f]{${2 * bytes}}$`).test(id) ? id : Buffer.from(id, 'base64').toString('hex');
}

/** Runs the service with `env`, sends it one order, stops it gracefully; resolves with what it logged. */
async function runServiceWithOneOrder(env: Record<string, string>, traceparent: string, messageId: string): Promise<string> {
  const child = spawn(process.execPath, ['--import', 'tsx', serverEntry], {
    env: { PATH: process.env.PATH ?? '', PORT: '0', DATABASE_URL: 'pglite:memory', LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  try {
    const deadline = Date.now() + 60_000;
    while (!/API docs at/.test(stdout) && Date.now() < deadline && child.exitCode === null) {
      await new Promise((r) => setTimeout(r, 100));
    }
    const base = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(stdout)?.[1];
    assert.ok(base, `the service did not start:\n${stdout}\n${stderr}`);
    const bookId = randomUUID();
    const stock = await fetch(`${base}/stock/${bookId}`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ title: 'Dune', onHand: 5 }),
      signal: AbortSignal.timeout(10_000),
    });
    assert.equal(stock.status, 201, await stock.text());
    const order = await fetch(`${base}/inventory/order-placed`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', traceparent },
      body: JSON.stringify({ messageId, type: 'OrderPlaced', data: { orderId: randomUUID(), bookId, quantity: 2 } }),
      signal: AbortSignal.timeout(10_000),
    });
    assert.equal(order.status, 201, await order.text());
  } finally {
    // A graceful stop flushes the spans still batched before the process exits.
    if (child.exitCode === null) {
      child.kill('SIGTERM');
      await once(child, 'exit');
    }
  }
  return stdout;
}

describe('spans exported over OTLP/HTTP to a receiver on loopback', () => {
  let receiver: OtlpReceiver;
  before(async () => {
    receiver = await OtlpReceiver.start();
  });
  after(async () => {
    await receiver?.close();
  });

  test("with OTEL_EXPORTER_OTLP_ENDPOINT set, the spans of one order arrive at /v1/traces as JSON, in the sender's trace", async () => {
    const traceId = randomBytes(16).toString('hex');
    const senderSpan = randomBytes(8).toString('hex');
    const messageId = `otlp-${randomUUID()}`;
    const logs = await runServiceWithOneOrder(
      {
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
        OTEL_SERVICE_NAME: 'bookstore-inventory-under-test',
      },
      `00-${traceId}-${senderSpan}-01`,
      messageId,
    );
    assert.match(logs, /tracing: spans of bookstore-inventory-under-test go to/, 'the start-up log says where spans go');

    assert.ok(receiver.requests.length > 0, 'the receiver was sent spans');
    for (const request of receiver.requests) {
      assert.equal(request.path, '/v1/traces');
      assert.match(request.contentType, /^application\/json/);
    }
    const spans = receiver.spans();
    const inTrace = spans.filter(({ span }) => hexId(span.traceId, 16) === traceId);
    for (const { resource } of inTrace) assert.equal(resource['service.name'], 'bookstore-inventory-under-test');

    const server = inTrace.find(({ span }) => span.name === 'POST /inventory/order-placed');
    assert.ok(server, `a server span in the trace; got ${inTrace.map(({ span }) => span.name).join(', ')}`);
    assert.equal(server.span.kind, 2, 'SPAN_KIND_SERVER');
    assert.equal(hexId(server.span.parentSpanId ?? '', 8), senderSpan);
    const serverAttributes = attributesOf(server.span.attributes);
    assert.equal(serverAttributes['http.route'], '/inventory/order-placed');
    assert.equal(serverAttributes['http.response.status_code'], 201);

    const claim = inTrace.find(({ span }) => span.name === 'claim inventory.reserve-stock');
    assert.ok(claim, 'a claim span in the trace');
    assert.equal(hexId(claim.span.parentSpanId ?? '', 8), hexId(server.span.spanId, 8));
    assert.deepEqual(
      (({ 'inbox.key': key, 'inbox.consumer': consumer, 'inbox.decision': decision }) => ({ key, consumer, decision }))(
        attributesOf(claim.span.attributes),
      ),
      { key: messageId, consumer: 'inventory.reserve-stock', decision: 'processed' },
    );

    const transaction = spans.find(({ span }) =>
      (span.links ?? []).some((link) => hexId(link.spanId, 8) === hexId(claim.span.spanId, 8) && hexId(link.traceId, 16) === traceId),
    );
    assert.ok(transaction, 'the group-commit transaction arrives too, linked to the claim');
    assert.equal(attributesOf(transaction.span.attributes)['db.system.name'], 'postgresql');
  });

  test('with no OTEL_* variable, the same service sends nothing and says nothing about tracing', async () => {
    const before = receiver.requests.length;
    const logs = await runServiceWithOneOrder(
      {},
      `00-${randomBytes(16).toString('hex')}-${randomBytes(8).toString('hex')}-01`,
      `otlp-${randomUUID()}`,
    );
    assert.doesNotMatch(logs, /tracing:/);
    assert.equal(receiver.requests.length, before, 'no export request');
  });
});
