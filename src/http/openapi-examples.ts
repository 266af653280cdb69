/**
 * The named examples of the OpenAPI document (Swagger UI's "Try it out" offers them as they are).
 * They form one walkthrough on a fresh service, in this order, and each request succeeds as written:
 *   1. PUT /stock/{bookId} with EXAMPLE_BOOK_ID: Dune, 10 copies (201, then 200);
 *   2. POST /inventory/order-placed once per key source, each for its own order (201 each time);
 *   3. POST /inventory/order-cancelled for orders 1001 and 1003 (201);
 *   4. POST /notifications/stock-reserved-email for order 1001 (201).
 * Sending any of them again is a duplicate: 200 with Idempotent-Replayed: true. A request example that
 * carries its key in headers lists them under `x-request-headers`; Swagger UI at /docs sends them with
 * the example (plugins/swagger-ui-examples.ts), and its description names them for curl users.
 */

/** The example book: every example order is for it. */
export const EXAMPLE_BOOK_ID = '0193a1b2-0000-7000-8000-000000000001';
export const EXAMPLE_BOOK = { title: 'Dune', onHand: 10 };

/** One order per key source, so each example is a new message the first time it is sent. */
export const EXAMPLE_ORDERS = {
  envelope: '0193a1b2-0000-7000-8000-000000001001',
  idempotencyKey: '0193a1b2-0000-7000-8000-000000001002',
  cloudEventStructured: '0193a1b2-0000-7000-8000-000000001003',
  cloudEventBinary: '0193a1b2-0000-7000-8000-000000001004',
  standardWebhooks: '0193a1b2-0000-7000-8000-000000001005',
} as const;

export const EXAMPLE_CE_SOURCE = 'urn:bookstore:ordering';
const AT = '2026-11-30T12:00:00Z';

/** An OpenAPI Example Object, with the headers the request needs besides its body. */
export interface NamedExample {
  summary: string;
  description?: string;
  value: unknown;
  'x-request-headers'?: Record<string, string>;
}

function headerNote(headers: Record<string, string>): string {
  return `Sent with the headers ${Object.entries(headers)
    .map(([name, value]) => `${name}: ${value}`)
    .join(', ')} (Swagger UI adds them when this example is executed; with curl, pass each with -H).`;
}

function withHeaders(summary: string, value: unknown, headers: Record<string, string>, description = ''): NamedExample {
  return {
    summary,
    description: `${description}${description === '' ? '' : ' '}${headerNote(headers)}`,
    value,
    'x-request-headers': headers,
  };
}

export const stockExamples = {
  bookId: { dune: { summary: 'Dune, the book every example uses', value: EXAMPLE_BOOK_ID } },
  body: {
    dune: {
      summary: 'Step 1: Dune, 10 copies on hand',
      description: '201 the first time (created), 200 after (updated).',
      value: EXAMPLE_BOOK,
    },
  } satisfies Record<string, NamedExample>,
};

const placed = (orderId: string, quantity: number) => ({ orderId, bookId: EXAMPLE_BOOK_ID, quantity });

/** Step 2: one order per key source; run step 1 first, or the outcome is unknown-book. */
export const orderPlacedExamples = {
  json: {
    envelope: {
      summary: 'Step 2a: envelope with messageId (order 1001, 2 copies)',
      description: "The key is the body's messageId. 201 reserved; send it again for 200 with Idempotent-Replayed: true.",
      value: { messageId: 'order-1001-placed', type: 'bookstore.order-placed', timestamp: AT, data: placed(EXAMPLE_ORDERS.envelope, 2) },
    },
    idempotencyKey: withHeaders(
      'Step 2b: key in an Idempotency-Key header (order 1002)',
      { type: 'bookstore.order-placed', data: placed(EXAMPLE_ORDERS.idempotencyKey, 1) },
      { 'idempotency-key': 'order-1002-placed' },
      'The envelope carries no messageId.',
    ),
    cloudEventBinary: withHeaders(
      'Step 2d: CloudEvents binary mode (order 1004)',
      placed(EXAMPLE_ORDERS.cloudEventBinary, 1),
      { 'ce-specversion': '1.0', 'ce-id': 'order-1004-placed', 'ce-source': EXAMPLE_CE_SOURCE, 'ce-type': 'bookstore.order-placed' },
      'The body is the bare data; the key is ce-source|ce-id.',
    ),
    standardWebhooks: withHeaders(
      'Step 2e: Standard Webhooks delivery (order 1005)',
      { type: 'order.placed', data: placed(EXAMPLE_ORDERS.standardWebhooks, 1) },
      { 'webhook-id': 'msg_order-1005-placed' },
      'The key is webhook-id. With WEBHOOK_SECRET set, webhook-timestamp and webhook-signature are needed too (and on every command).',
    ),
  } satisfies Record<string, NamedExample>,
  cloudEvent: {
    structured: {
      summary: 'Step 2c: CloudEvents structured mode (order 1003)',
      description: 'The key is source|id; partitionkey is an extension attribute. 201 reserved.',
      value: {
        specversion: '1.0',
        id: 'order-1003-placed',
        source: EXAMPLE_CE_SOURCE,
        type: 'bookstore.order-placed',
        time: AT,
        datacontenttype: 'application/json',
        partitionkey: 'order-1003',
        data: placed(EXAMPLE_ORDERS.cloudEventStructured, 1),
      },
    },
  } satisfies Record<string, NamedExample>,
};

/** Step 3: release two of the orders placed in step 2. */
export const orderCancelledExamples = {
  json: {
    envelope: {
      summary: 'Step 3a: cancel order 1001 (envelope)',
      description: 'Releases the 2 copies order 1001 reserved: 201 released.',
      value: { messageId: 'order-1001-cancelled', type: 'bookstore.order-cancelled', data: { orderId: EXAMPLE_ORDERS.envelope } },
    },
  } satisfies Record<string, NamedExample>,
  cloudEvent: {
    structured: {
      summary: 'Step 3b: cancel order 1003 (CloudEvents structured mode)',
      description: "Releases order 1003's reservation of the example book: 201 released.",
      value: {
        specversion: '1.0',
        id: 'order-1003-cancelled',
        source: EXAMPLE_CE_SOURCE,
        type: 'bookstore.order-cancelled',
        data: { orderId: EXAMPLE_ORDERS.cloudEventStructured, bookId: EXAMPLE_BOOK_ID },
      },
    },
  } satisfies Record<string, NamedExample>,
};

const email = (orderId: string, quantity: number) => ({ orderId, bookId: EXAMPLE_BOOK_ID, quantity, email: 'ada@example.org' });

/** Step 4: the stock-reserved email for an order. */
export const stockReservedEmailExamples = {
  json: {
    envelope: {
      summary: 'Step 4a: email for order 1001 (envelope)',
      description: 'Sent once (EMAIL_PROVIDER=log appends it to EMAIL_LOG_FILE): 201 sent.',
      value: { messageId: 'order-1001-email', type: 'bookstore.stock-reserved', data: email(EXAMPLE_ORDERS.envelope, 2) },
    },
  } satisfies Record<string, NamedExample>,
  cloudEvent: {
    structured: {
      summary: 'Step 4b: email for order 1003 (CloudEvents structured mode)',
      description: '201 sent.',
      value: {
        specversion: '1.0',
        id: 'order-1003-email',
        source: EXAMPLE_CE_SOURCE,
        type: 'bookstore.stock-reserved',
        data: email(EXAMPLE_ORDERS.cloudEventStructured, 1),
      },
    },
  } satisfies Record<string, NamedExample>,
};

/** The response examples of a command: its first example processed (201), and the same message replayed (200). */
export function commandResultExamples(consumer: string, messageId: string, outcome: unknown) {
  const result = {
    consumer,
    messageId,
    keySource: 'body',
    receivedAt: '2026-11-30T12:00:01.250Z',
    processedAt: '2026-11-30T12:00:01.250Z',
    outcome,
  };
  return {
    201: { processed: { summary: 'Processed by this request', value: { status: 'processed', ...result } } },
    200: { duplicate: { summary: 'A duplicate: the first outcome, replayed', value: { status: 'duplicate', ...result } } },
  };
}
