import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { SpanKind } from '@opentelemetry/api';
import type { ReadableSpan } from '@opentelemetry/sdk-trace';
import type { FastifyInstance } from 'fastify';
import type { GetMessage } from 'amqplib';
import { RESERVE_STOCK } from '../../src/inventory/order.commands.js';
import { STOCK_RESERVED } from '../../src/inventory/stock-events.js';
import { eventBody, eventually, skipWithoutAmqp, TestBroker, uniqueTopology } from '../support/amqp.js';
import { postgresDatabase, testDatabases, type TestDatabaseHandle } from '../support/databases.js';
import { newId, orderPlaced, placeOrder, seedBook, testApp } from '../support/fixtures.js';
import { SpanRecorder } from '../support/span-recorder.js';

/**
 * One trace from the sender to the event's consumer, through a test exporter: an HTTP command and an
 * AMQP command, each sent with its own W3C traceparent, are followed through the server or consumer
 * span, the claim (with its decision), the group-commit transaction (linked, not parented) and the
 * relay's publish, to the traceparent header of the event a downstream queue receives.
 */

const target = postgresDatabase ?? testDatabases[0]!;

function hex(bytes: number): string {
  return randomBytes(bytes).toString('hex');
}

describe(`traces of one HTTP and one AMQP command (${target.name})`, { skip: skipWithoutAmqp }, () => {
  const recorder = new SpanRecorder();
  let database: TestDatabaseHandle;
  let app: FastifyInstance;
  let broker: TestBroker;
  let events: string;

  before(async () => {
    recorder.start();
    database = await target.open();
    const topology = uniqueTopology();
    broker = await TestBroker.open(topology);
    events = await broker.bindQueue(topology.amqpExchange, STOCK_RESERVED);
    app = await testApp(database, { config: { ...topology, amqpRetryDelayMs: 50, outboxRelayIntervalMs: 100 } });
  });
  after(async () => {
    await app?.close();
    await broker?.close();
    await database?.close();
    await recorder.stop();
  });

  const spans = () => recorder.spans();
  const idOf = (span: ReadableSpan) => span.spanContext().spanId;
  const traceOf = (span: ReadableSpan) => span.spanContext().traceId;
  /** The one finished span of `traceId` that matches, once it has ended (the relay's end at the broker's confirm). */
  function spanOf(what: string, traceId: string, match: (span: ReadableSpan) => boolean): Promise<ReadableSpan> {
    return eventually(what, async () => {
      const found = spans().filter((s) => traceOf(s) === traceId && match(s));
      assert.ok(found.length <= 1, `one ${what}, not ${found.length}`);
      return found[0];
    });
  }
  /** The stock-reserved event of this message as the downstream queue received it. */
  const received = new Map<string, GetMessage>();
  function eventOf(messageId: string): Promise<GetMessage> {
    return eventually(`the event of ${messageId}`, async () => {
      for (const message of await broker.drain(events)) received.set(eventBody(message).causationid, message);
      return received.get(messageId);
    });
  }
  /** The transaction span that links to this claim span. */
  function transactionLinking(claim: ReadableSpan): Promise<ReadableSpan> {
    return eventually('the group-commit transaction linking the claim', async () =>
      spans().find(
        (s) =>
          s.name === `transaction ${RESERVE_STOCK}` &&
          s.links.some((l) => l.context.traceId === traceOf(claim) && l.context.spanId === idOf(claim)),
      ),
    );
  }

  test('HTTP: server span continues the sender, the claim is its child, the transaction links it, the event carries the trace', async () => {
    const book = await seedBook(app, 10);
    const traceId = hex(16);
    const senderSpan = hex(8);
    const message = orderPlaced(book, 2);
    const res = await placeOrder(app, message, { traceparent: `00-${traceId}-${senderSpan}-01` });
    assert.equal(res.statusCode, 201, res.body);

    const server = await spanOf('server span', traceId, (s) => s.kind === SpanKind.SERVER);
    assert.equal(server.name, 'POST /inventory/order-placed');
    assert.equal(server.parentSpanContext?.spanId, senderSpan, "the sender's span is the server span's parent");
    assert.equal(server.attributes['http.request.method'], 'POST');
    assert.equal(server.attributes['http.route'], '/inventory/order-placed');
    assert.equal(server.attributes['http.response.status_code'], 201);

    const claim = await spanOf('claim span', traceId, (s) => s.name === `claim ${RESERVE_STOCK}`);
    assert.equal(claim.parentSpanContext?.spanId, idOf(server), 'the claim is a child of the server span');
    assert.equal(claim.attributes['inbox.consumer'], RESERVE_STOCK);
    assert.equal(claim.attributes['inbox.key'], message.messageId);
    assert.equal(claim.attributes['inbox.decision'], 'processed');

    const transaction = await transactionLinking(claim);
    assert.equal(transaction.parentSpanContext, undefined, 'the transaction is a root of its own, linked to each command it carries');
    assert.notEqual(traceOf(transaction), traceId);
    assert.equal(transaction.attributes['db.system.name'], 'postgresql');
    assert.equal(transaction.attributes['inbox.consumer'], RESERVE_STOCK);

    const event = await eventOf(message.messageId);
    const publish = await spanOf('publish span', traceId, (s) => s.kind === SpanKind.PRODUCER);
    assert.equal(publish.parentSpanContext?.spanId, idOf(claim), "the publish continues the command's claim");
    assert.equal(publish.attributes['messaging.system'], 'rabbitmq');
    assert.equal(publish.attributes['messaging.operation.type'], 'send');
    assert.equal(publish.attributes['messaging.destination.name'], broker.topology.amqpExchange);
    assert.equal(publish.attributes['messaging.message.id'], event.properties.messageId);
    assert.equal(
      event.properties.headers?.traceparent,
      `00-${traceId}-${idOf(publish)}-01`,
      "the event's traceparent: the same trace, the publish span as parent",
    );

    // A copy: the claim says duplicate, and nothing is published again.
    const copy = await placeOrder(app, message, { traceparent: `00-${traceId}-${hex(8)}-01` });
    assert.equal(copy.statusCode, 200);
    const claims = await eventually('the copy claim', async () => {
      const found = spans().filter((s) => traceOf(s) === traceId && s.name === `claim ${RESERVE_STOCK}`);
      return found.length === 2 ? found : undefined;
    });
    assert.deepEqual(claims.map((s) => s.attributes['inbox.decision']).sort(), ['duplicate', 'processed']);

    // The key reused with another payload: the claim says so, with the dead letter it became.
    const reused = await placeOrder(
      app,
      { ...message, data: { ...message.data, quantity: 3 } },
      { traceparent: `00-${traceId}-${hex(8)}-01` },
    );
    assert.equal(reused.statusCode, 422);
    const reuse = await eventually('the reused claim', async () =>
      spans().find((s) => traceOf(s) === traceId && s.attributes['inbox.decision'] === 'reused'),
    );
    assert.equal(typeof reuse.attributes['inbox.dead_letter.id'], 'string');
  });

  test('AMQP: the consumer span continues the traceparent of the message headers, down to the published event', async () => {
    const book = await seedBook(app, 10);
    const traceId = hex(16);
    const senderSpan = hex(8);
    const message = orderPlaced(book, 1, `msg-${newId()}`);
    broker.channel.sendToQueue(broker.topology.amqpOrderPlacedQueue, Buffer.from(JSON.stringify(message)), {
      persistent: true,
      contentType: 'application/json',
      messageId: message.messageId,
      headers: { traceparent: `00-${traceId}-${senderSpan}-01`, tracestate: 'sender=1' },
    });

    const consumer = await spanOf('consumer span', traceId, (s) => s.kind === SpanKind.CONSUMER);
    assert.equal(consumer.name, `process ${broker.topology.amqpOrderPlacedQueue}`);
    assert.equal(consumer.parentSpanContext?.spanId, senderSpan, "the sender's span is the consumer span's parent");
    assert.equal(consumer.spanContext().traceState?.get('sender'), '1', 'tracestate is kept');
    assert.equal(consumer.attributes['messaging.system'], 'rabbitmq');
    assert.equal(consumer.attributes['messaging.destination.name'], broker.topology.amqpOrderPlacedQueue);
    assert.equal(consumer.attributes['messaging.operation.type'], 'process');
    assert.equal(consumer.attributes['messaging.message.id'], message.messageId);
    assert.equal(consumer.attributes['inbox.key'], message.messageId);
    assert.equal(consumer.attributes['inbox.decision'], 'processed');

    const claim = await spanOf('claim span', traceId, (s) => s.name === `claim ${RESERVE_STOCK}`);
    assert.equal(claim.parentSpanContext?.spanId, idOf(consumer), 'the claim is a child of the consumer span');
    assert.equal(claim.attributes['inbox.decision'], 'processed');
    await transactionLinking(claim);

    const event = await eventOf(message.messageId);
    const publish = await spanOf('publish span', traceId, (s) => s.kind === SpanKind.PRODUCER);
    assert.equal(publish.parentSpanContext?.spanId, idOf(claim));
    assert.equal(event.properties.headers?.traceparent, `00-${traceId}-${idOf(publish)}-01`);
    assert.equal(event.properties.headers?.tracestate, 'sender=1', "the sender's tracestate travels with the event");

    const row = await app.db
      .selectFrom('outbox')
      .select(['trace_parent', 'trace_state'])
      .where('id', '=', String(event.properties.messageId))
      .executeTakeFirstOrThrow();
    assert.deepEqual(
      row,
      { trace_parent: `00-${traceId}-${idOf(claim)}-01`, trace_state: 'sender=1' },
      "the outbox row keeps the claim's context",
    );
  });
});
