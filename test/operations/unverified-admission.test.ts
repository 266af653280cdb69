import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { Webhook } from 'standardwebhooks';
import type { Config } from '../../src/config.js';
import { apiKeyDigest } from '../../src/producer-config.js';
import { testDatabases, type TestDatabaseHandle } from '../support/databases.js';
import { newId, orderPlaced, reservedOf, seedBook, tableCounts, testApp } from '../support/fixtures.js';
import { eventually } from '../support/amqp.js';

/**
 * Admission with producers configured, over real sockets. An API key is checked from the headers before a
 * command takes a place of HTTP_MAX_COMMANDS_IN_FLIGHT; a signed delivery (its signature needs the body)
 * is read under a bound of its own (HTTP_MAX_UNVERIFIED_COMMANDS) and must send its body within
 * HTTP_UNVERIFIED_BODY_TIMEOUT_MS. So clients with no credential that never finish their body cannot
 * keep a producer with a valid key out.
 */

const API_KEY = randomBytes(32).toString('base64url');
const SECRET = `whsec_${randomBytes(24).toString('base64')}`;
const PRODUCERS: Config['producers'] = [
  { id: 'orders', apiKeySha256: [apiKeyDigest(API_KEY)], webhookSecrets: [], rateLimitMax: undefined },
  { id: 'shipping', apiKeySha256: [], webhookSecrets: [SECRET], rateLimitMax: undefined },
];

/** A raw connection: what it received, and whether the server closed it. */
interface Raw {
  socket: Socket;
  received: () => string;
  closed: Promise<void>;
}

/** Sends a signed-looking delivery's headers and the start of its body, and never the rest. */
function slowSignedDelivery(port: number): Promise<Raw> {
  return new Promise((resolve, reject) => {
    let data = '';
    const socket = connect(port, '127.0.0.1', () => {
      socket.write(
        'POST /inventory/order-placed HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 300\r\n' +
          `webhook-id: msg_${newId()}\r\nwebhook-timestamp: ${Math.floor(Date.now() / 1000)}\r\n` +
          `webhook-signature: v1,${randomBytes(32).toString('base64')}\r\n\r\n{"type":"order.placed","data":`,
      );
      resolve({ socket, received: () => data, closed });
    });
    const closed = new Promise<void>((done) => socket.on('close', () => done()));
    socket.on('data', (chunk: Buffer) => (data += chunk.toString()));
    socket.on('error', reject);
  });
}

function statusOf(raw: Raw): number | undefined {
  const match = /^HTTP\/1\.1 (\d{3})/.exec(raw.received());
  return match === null ? undefined : Number(match[1]);
}

function bodyOf(raw: Raw): { type?: string; detail?: string } {
  const text = raw.received();
  return JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4)) as { type?: string; detail?: string };
}

function served(database: () => TestDatabaseHandle, config: Partial<Config>) {
  const state = { app: undefined as unknown as FastifyInstance, port: 0 };
  before(async () => {
    state.app = await testApp(database(), { config: { producers: PRODUCERS, rateLimitMax: 0, inboxPruneIntervalMs: 0, ...config } });
    await state.app.listen({ port: 0, host: '127.0.0.1' });
    state.port = (state.app.server.address() as AddressInfo).port;
  });
  after(async () => {
    state.app?.server.closeAllConnections();
    await state.app?.close();
  });
  const base = () => `http://127.0.0.1:${state.port}`;
  return {
    state,
    withKey: (body: unknown) =>
      fetch(`${base()}/inventory/order-placed`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${API_KEY}` },
        body: JSON.stringify(body),
      }),
    signed: (data: unknown) => {
      const body = JSON.stringify({ type: 'order.placed', data });
      const id = `msg_${newId()}`;
      const at = new Date();
      return fetch(`${base()}/inventory/order-placed`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'webhook-id': id,
          'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
          'webhook-signature': new Webhook(SECRET).sign(id, at, body),
        },
        body,
      });
    },
  };
}

const target = testDatabases[0]!;

describe('admission: signed deliveries not yet verified cannot crowd out producers with API keys', () => {
  let database: TestDatabaseHandle;
  before(async () => {
    database = await target.open();
  });
  after(async () => {
    await database?.close();
  });

  describe('slow unsigned bodies held open', () => {
    const UNVERIFIED = 3;
    const SLOW = 12;
    const { state, withKey, signed } = served(() => database, {
      httpMaxCommandsInFlight: 4,
      httpAdmissionWaitMs: 0,
      httpMaxUnverifiedCommands: UNVERIFIED,
      httpRequestTimeoutMs: 120_000,
      httpUnverifiedBodyTimeoutMs: 120_000,
    });

    test(`${SLOW} connections that never finish a signed body: past their own bound they are 503 at once, and a producer with an API key still gets 201`, async () => {
      const book = await seedBook(state.app, 100);
      const slow: Raw[] = [];
      try {
        for (let i = 0; i < SLOW; i++) slow.push(await slowSignedDelivery(state.port));
        // At least the ones past either bound are answered at once (HTTP_MAX_COMMANDS_IN_FLIGHT is 4).
        await eventually('the slow deliveries past the bound refused', async () =>
          slow.filter((s) => statusOf(s) !== undefined).length >= SLOW - 4 ? true : undefined,
        );

        // The held ones still hold their places: a verified producer is admitted all the same, time after time.
        for (let i = 0; i < 6; i++) {
          const res = await withKey(orderPlaced(book, 1));
          assert.equal(res.status, 201, await res.text());
        }
        assert.equal(await reservedOf(state.app.db, book), 6);

        const refused = await eventually('every slow delivery past their own bound refused', async () => {
          const answered = slow.filter((s) => statusOf(s) !== undefined);
          return answered.length === SLOW - UNVERIFIED ? answered : undefined;
        });
        for (const raw of refused) {
          assert.equal(statusOf(raw), 503);
          assert.equal(bodyOf(raw).type, '/problems/overloaded');
          assert.match(bodyOf(raw).detail ?? '', /HTTP_MAX_UNVERIFIED_COMMANDS/);
        }
        // A genuine signed delivery waits behind them for a place of their bound: refused now...
        const crowded = await signed(orderPlaced(book, 1).data);
        assert.equal(crowded.status, 503);
      } finally {
        for (const raw of slow) raw.socket.destroy();
      }
      // ...and admitted once they are gone.
      await eventually('the slow connections gone', async () => (state.app.commandAdmission.unverified === 0 ? true : undefined));
      const res = await signed(orderPlaced(book, 1).data);
      assert.equal(res.status, 201, await res.text());
      assert.equal(await reservedOf(state.app.db, book), 7);
    });
  });

  describe('a signed body that does not arrive in time', () => {
    const { state, signed } = served(() => database, { httpUnverifiedBodyTimeoutMs: 200 });

    test('is answered 408 request-timeout naming HTTP_UNVERIFIED_BODY_TIMEOUT_MS and its connection closed; nothing recorded', async () => {
      const book = await seedBook(state.app, 10);
      const before = await tableCounts(state.app.db);
      const raw = await slowSignedDelivery(state.port);
      await raw.closed;
      assert.equal(statusOf(raw), 408, raw.received());
      assert.match(raw.received(), /content-type: application\/problem\+json/i);
      assert.equal(bodyOf(raw).type, '/problems/request-timeout');
      assert.match(bodyOf(raw).detail ?? '', /HTTP_UNVERIFIED_BODY_TIMEOUT_MS/);
      assert.deepEqual(await tableCounts(state.app.db), before);
      const res = await signed(orderPlaced(book, 2).data);
      assert.equal(res.status, 201, await res.text());
    });
  });
});
