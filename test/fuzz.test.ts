import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import fc from 'fast-check';
import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify';
import { sql } from 'kysely';
import { Webhook } from 'standardwebhooks';
import { BODY_LIMIT_BYTES } from '../src/app.js';
import type { Db } from '../src/schema/database.js';
import { cloudEventKey } from '../src/inbox/key-sources.js';
import { reportMissingDatabases, type TestDatabaseHandle, testDatabases } from './support/databases.js';
import { ADMIN_TOKEN, newId, seedBook, tableCounts, testApp } from './support/fixtures.js';

/**
 * Property-based fuzzing of the HTTP API with fast-check, through app.inject, on every configured
 * database, unsigned and with WEBHOOK_SECRET set. Requests are arbitrary and malformed envelopes,
 * CloudEvents, headers, media types, sizes, unicode, control characters, long keys, SQL-looking
 * strings and numbers at and past the limits. Property: a valid command (or PUT /stock) answers 2xx;
 * anything else a 4xx application/problem+json whose `status` is the HTTP status; never a 5xx; and
 * after a 4xx the database is exactly as before.
 *
 * Command routes: order-placed, order-cancelled and the stock-reserved email; admin: PUT /stock.
 * FUZZ_RUNS sets the cases per configuration (default 300; `npm run fuzz` runs 5000), FUZZ_SEED
 * replays a failing run (fast-check prints the seed and the shrunk counterexample).
 */

const RUNS = Number(process.env.FUZZ_RUNS ?? 300);
const SEED = process.env.FUZZ_SEED === undefined ? undefined : Number(process.env.FUZZ_SEED);
const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const signer = new Webhook(SECRET);

// ---------------------------------------------------------------------------------------------
// The oracle: what the contract says about a request, computed independently of the service.
// 'maybe' marks what the contract leaves open (e.g. media-type spelling); only "never 5xx, a 4xx
// is a problem and changes nothing" is asserted for those.

type Verdict = 'valid' | 'invalid' | 'maybe';

function worst(...verdicts: Verdict[]): Verdict {
  if (verdicts.includes('invalid')) return 'invalid';
  if (verdicts.includes('maybe')) return 'maybe';
  return 'valid';
}

const KEY = /^[\x21-\x7E]{1,200}$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const codePoints = (s: string) => [...s].length;
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const onlyKeys = (o: Record<string, unknown>, allowed: string[]) => Object.keys(o).every((k) => allowed.includes(k));
const validString = (v: unknown, min: number, max: number) => typeof v === 'string' && codePoints(v) >= min && codePoints(v) <= max;
const validInt = (v: unknown, min: number, max: number) => typeof v === 'number' && Number.isInteger(v) && v >= min && v <= max;

function hasNul(value: unknown): boolean {
  if (typeof value === 'string') return value.includes('\u0000');
  if (Array.isArray(value)) return value.some(hasNul);
  if (isObject(value)) return Object.entries(value).some(([k, v]) => k.includes('\u0000') || hasNul(v));
  return false;
}

function orderPlacedValid(d: unknown): boolean {
  return (
    isObject(d) &&
    onlyKeys(d, ['orderId', 'bookId', 'quantity']) &&
    typeof d.orderId === 'string' &&
    UUID.test(d.orderId) &&
    typeof d.bookId === 'string' &&
    UUID.test(d.bookId) &&
    validInt(d.quantity, 1, 1000)
  );
}

function orderCancelledValid(d: unknown): boolean {
  return (
    isObject(d) &&
    onlyKeys(d, ['orderId', 'bookId']) &&
    typeof d.orderId === 'string' &&
    UUID.test(d.orderId) &&
    (d.bookId === undefined || (typeof d.bookId === 'string' && UUID.test(d.bookId)))
  );
}

/** ajv-formats' `email` (the schema's format), copied: the contract names that format. */
const EMAIL =
  /^[a-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[a-z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$/i;

function emailDataValid(d: unknown): boolean {
  return (
    isObject(d) &&
    onlyKeys(d, ['orderId', 'bookId', 'quantity', 'email']) &&
    typeof d.orderId === 'string' &&
    UUID.test(d.orderId) &&
    typeof d.bookId === 'string' &&
    UUID.test(d.bookId) &&
    validInt(d.quantity, 1, 1000) &&
    typeof d.email === 'string' &&
    d.email.length <= 254 &&
    EMAIL.test(d.email)
  );
}

/** What toISOString writes is a date-time for certain; spellings ajv-formats may read either way are 'maybe'. */
const ISO_DATE_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/;

function envelopeVerdict(body: Record<string, unknown>, dataValid: (d: unknown) => boolean): Verdict {
  if (!onlyKeys(body, ['messageId', 'type', 'timestamp', 'data']) || !('data' in body) || !dataValid(body.data)) return 'invalid';
  if ('messageId' in body && !(typeof body.messageId === 'string' && KEY.test(body.messageId))) return 'invalid';
  if ('type' in body && !validString(body.type, 1, 200)) return 'invalid';
  if ('timestamp' in body) {
    if (typeof body.timestamp !== 'string') return 'invalid';
    if (timestampsMaybe.has(body.timestamp)) return 'maybe';
    if (
      !ISO_DATE_TIME.test(body.timestamp) ||
      Number.isNaN(Date.parse(body.timestamp)) ||
      new Date(body.timestamp).toISOString() !== body.timestamp
    )
      return 'invalid';
  }
  return 'valid';
}

function cloudEventVerdict(body: Record<string, unknown>, dataValid: (d: unknown) => boolean): Verdict {
  const context = ['specversion', 'id', 'source', 'type', 'datacontenttype', 'dataschema', 'subject', 'time', 'data'];
  for (const [k, v] of Object.entries(body)) {
    if (context.includes(k)) continue;
    if (!/^[a-z0-9]{1,20}$/.test(k) || k === 'data_base64' || !(typeof v === 'string' || typeof v === 'boolean' || Number.isInteger(v)))
      return 'invalid';
  }
  if (body.specversion !== '1.0' || !validString(body.id, 1, 1000) || !validString(body.source, 1, 1000) || !validString(body.type, 1, 200))
    return 'invalid';
  if ('datacontenttype' in body && body.datacontenttype !== 'application/json') return 'invalid';
  if ('subject' in body && !validString(body.subject, 0, 1000)) return 'invalid';
  if (!('data' in body) || !dataValid(body.data)) return 'invalid';
  return 'valid';
}

/** The one key every source agrees on, or why there is none (missing, invalid, conflicting). */
function keyVerdict(
  headers: Record<string, string | string[]>,
  cloudEvent: { source: string; id: string } | undefined,
  bodyKey: unknown,
): Verdict {
  const one = (name: string) => {
    const v = headers[name];
    return Array.isArray(v) ? v.join(', ') : v;
  };
  const found: string[] = [];
  const webhookId = one('webhook-id');
  if (webhookId !== undefined) found.push(webhookId.trim());
  if (cloudEvent !== undefined) found.push(cloudEventKey(cloudEvent.source, cloudEvent.id));
  const header = one('idempotency-key');
  if (header !== undefined) {
    const t = header.trim();
    if (t.startsWith('"')) {
      const m = /^"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)"$/.exec(t);
      if (m === null) return 'invalid';
      found.push(m[1]!.replace(/\\(["\\])/g, '$1'));
    } else found.push(t);
  }
  if (bodyKey !== undefined) {
    if (typeof bodyKey !== 'string') return 'invalid';
    found.push(bodyKey);
  }
  if (found.length === 0 || !found.every((k) => KEY.test(k) && k === found[0])) return 'invalid';
  return 'valid';
}

// ---------------------------------------------------------------------------------------------
// Generators

/** Values that are one JSON text on the wire: a number's spelling matters ("1.0", "1e3", "1e400"). */
class Raw {
  constructor(readonly text: string) {}
}

function serialize(value: unknown): string {
  const raws: string[] = [];
  const text = JSON.stringify(value, (_k, v: unknown) => {
    if (v instanceof Raw) {
      raws.push(v.text);
      return `\u0002RAW${raws.length - 1}\u0002`;
    }
    return v;
  });
  return text.replace(/"\\u0002RAW(\d+)\\u0002"/g, (_m, i: string) => raws[Number(i)]!);
}

const sqlish = [
  "'; DROP TABLE inbox; --",
  "1' OR '1'='1",
  "';DROP/**/TABLE/**/stock_items;--",
  'NULL',
  '$1',
  "\\'",
  'Robert"); DELETE FROM inbox;--',
  '%27%20OR%201=1',
];
const weird = [
  '',
  ' ',
  '\t',
  'ключ',
  '键',
  '🦄📚',
  'a b',
  'k\n',
  'k\r\n',
  'k\u0000',
  '\u0000',
  'k\u0007',
  '\u00a0',
  '\u202e',
  '\ud800',
  '\udfff',
  'é',
  'x'.repeat(201),
  'y'.repeat(5000),
];

const anyText = fc.oneof(
  { weight: 4, arbitrary: fc.string({ maxLength: 40 }) },
  { weight: 2, arbitrary: fc.string({ unit: 'grapheme', maxLength: 30 }) },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 30 }) },
  { weight: 2, arbitrary: fc.constantFrom(...sqlish, ...weird) },
);

/** A header-safe text: HTTP carries tab, visible ASCII, space and obs-text (0x80-0xFF) only. */
const headerText = fc.oneof(
  fc.stringMatching(/^[\x21-\x7E]{1,60}$/),
  fc.string({ maxLength: 40 }).map((s) => s.replace(/[^\t\x20-\x7e]/g, '')),
  fc.constantFrom(
    '',
    ' ',
    'a b',
    '"quoted"',
    '"unterminated',
    '\u00e9\u00ff',
    'x'.repeat(201),
    "';DROP/**/TABLE/**/inbox;--",
    'k'.repeat(200),
  ),
);

/** A key shape; valid ones get the case's nonce so every valid command is a new message. */
type KeyShape = { kind: 'fresh'; base: string; length?: number } | { kind: 'as-is'; value: unknown };
const keyShape: fc.Arbitrary<KeyShape> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ kind: fc.constant('fresh' as const), base: fc.stringMatching(/^[\x21-\x7E]{0,40}$/) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('fresh' as const), base: fc.constantFrom(...sqlish.filter((s) => KEY.test(s))) }) },
  {
    weight: 1,
    arbitrary: fc.record({ kind: fc.constant('fresh' as const), base: fc.constant(''), length: fc.constantFrom(199, 200, 201, 1000) }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('as-is' as const),
      value: fc.oneof(anyText, fc.integer(), fc.constant(null), fc.boolean(), fc.constant({})),
    }),
  },
);

function keyValue(shape: KeyShape, nonce: string): unknown {
  // A value that happens to be a valid key gets the nonce too: reused with another payload it would be a 422.
  if (shape.kind === 'as-is')
    return typeof shape.value === 'string' && KEY.test(shape.value) ? `${nonce}${shape.value}`.slice(0, 200) : shape.value;
  const key = `${nonce}${shape.base}`;
  return shape.length === undefined ? key.slice(0, 200) : key.padEnd(shape.length, 'k').slice(0, shape.length);
}

const knownUuid = (pool: string[]) => fc.constantFrom(...pool);
const uuidLike = (pool: string[]) =>
  fc.oneof(
    { weight: 12, arbitrary: knownUuid(pool) },
    { weight: 6, arbitrary: fc.uuid() },
    { weight: 1, arbitrary: fc.uuid().map((u) => u.toUpperCase()) },
    { weight: 1, arbitrary: fc.constantFrom('00000000-0000-0000-0000-000000000000', 'ffffffff-ffff-ffff-ffff-ffffffffffff') },
    {
      weight: 2,
      arbitrary: fc.oneof(
        fc.uuid().map((u) => `urn:uuid:${u}`),
        fc.uuid().map((u) => `{${u}}`),
        fc.uuid().map((u) => u.replaceAll('-', '')),
        fc.uuid().map((u) => `${u}\n`),
        fc.uuid().map((u) => ` ${u}`),
        fc.uuid().map((u) => u.slice(0, 35)),
        fc.uuid().map((u) => `${u}0`),
        fc.uuid().map((u) => u.replace(/[0-9]/, '\uff11')),
        anyText,
        fc.integer(),
        fc.constant(null),
      ),
    },
  );

/** Integers at and past the limits, in several JSON spellings. */
const numberish = (min: number, max: number) =>
  fc.oneof(
    { weight: 14, arbitrary: fc.integer({ min, max }) },
    {
      weight: 2,
      arbitrary: fc.constantFrom(
        min,
        max,
        min,
        max,
        min - 1,
        max + 1,
        -1,
        0,
        2 ** 31 - 1,
        2 ** 31,
        -(2 ** 31) - 1,
        2 ** 53,
        Number.MAX_SAFE_INTEGER + 2,
      ),
    },
    { weight: 1, arbitrary: fc.double({ noNaN: true, noDefaultInfinity: true }) },
    {
      weight: 2,
      arbitrary: fc.constantFrom(
        new Raw('1.0'),
        new Raw('1e3'),
        new Raw('1E0'),
        new Raw('-0'),
        new Raw('1e400'),
        new Raw('-1e400'),
        new Raw('1.5'),
        new Raw('0.1e1'),
        new Raw('1000.0000000000001'),
        new Raw('99999999999999999999999'),
      ),
    },
    { weight: 1, arbitrary: fc.oneof(fc.constant('3'), fc.constant(null), fc.boolean(), fc.constant([]), fc.constant({})) },
  );

/** Sometimes drop a field, sometimes add one the schema does not know. */
function tamper<T extends Record<string, unknown>>(base: fc.Arbitrary<T>): fc.Arbitrary<Record<string, unknown>> {
  return fc
    .tuple(
      base,
      fc.oneof(
        { weight: 16, arbitrary: fc.constant('none') },
        { weight: 1, arbitrary: fc.constantFrom('drop', 'extra', 'proto', 'nested') },
      ),
      fc.nat(),
    )
    .map(([value, how, n]) => {
      const keys = Object.keys(value);
      if (how === 'drop' && keys.length > 0) {
        const copy: Record<string, unknown> = { ...value };
        delete copy[keys[n % keys.length]!];
        return copy;
      }
      if (how === 'extra') return { ...value, [pickFrom(['extra', 'Quantity', 'messageid', '', '$where'], n)]: 1 };
      if (how === 'proto') return { ...value, ['__proto__']: { polluted: true } };
      if (how === 'nested') return { ...value, [keys[n % Math.max(keys.length, 1)] ?? 'x']: deep(200 + (n % 2000)) };
      return value;
    });
}

function pickFrom<T>(items: readonly T[], n: number): T {
  return items[n % items.length]!;
}

function deep(levels: number): unknown {
  let v: unknown = 1;
  for (let i = 0; i < levels; i++) v = [v];
  return v;
}

const orderPlacedData = (books: string[], orders: string[]) =>
  tamper(fc.record({ orderId: uuidLike(orders), bookId: uuidLike(books), quantity: numberish(1, 1000) }));
const email = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom('ada@example.org', 'o.brien+books@shop.example.co', 'x@y.io') },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      '',
      'ada',
      '@example.org',
      'ada@',
      'a b@example.org',
      'ada@example',
      'ädä@example.org',
      `${'a'.repeat(250)}@example.org`,
      "'; DROP TABLE inbox; --@example.org",
    ),
  },
  { weight: 1, arbitrary: anyText },
);
const emailData = (books: string[], orders: string[]) =>
  tamper(fc.record({ orderId: uuidLike(orders), bookId: uuidLike(books), quantity: numberish(1, 1000), email }));
const orderCancelledData = (books: string[], orders: string[]) =>
  tamper(fc.record({ orderId: uuidLike(orders), bookId: uuidLike(books) }, { requiredKeys: ['orderId'] }));

const timestampsMaybe = new Set(['2024-01-01T00:00:00', '2024-01-01t00:00:00z', '2024-01-01T00:00:00+01:00', '2016-12-31T23:59:60Z']);
const timestamp = fc.oneof(
  fc
    .date({ min: new Date('1970-01-01T00:00:00Z'), max: new Date('2100-01-01T00:00:00Z'), noInvalidDate: true })
    .map((d) => d.toISOString()),
  fc.constantFrom('yesterday', '', '2024-01-01', '2024-13-45T99:99:99Z', '2024-02-30T00:00:00Z', ...timestampsMaybe),
  fc.integer(),
);

const contentType = (kind: 'json' | 'cloudevents') =>
  fc.oneof(
    { weight: 16, arbitrary: fc.constant(kind === 'json' ? 'application/json' : 'application/cloudevents+json') },
    {
      weight: 2,
      arbitrary: fc.constant(kind === 'json' ? 'application/json; charset=utf-8' : 'application/cloudevents+json; charset=utf-8'),
    },
    {
      weight: 2,
      arbitrary: fc.constantFrom(
        'text/plain',
        'application/xml',
        'application/x-www-form-urlencoded',
        'multipart/form-data; boundary=x',
        'application/jsonx',
        'application/json-patch+json',
        '*/*',
        ';;;',
        'application/',
        'APPLICATION/JSON',
        'application/json;charset=utf-8',
        'application/json; charset=utf-16',
        'application/json; charset=latin1',
        'application/cloudevents+json',
        'application/json',
        'application/cloudevents-batch+json',
        'text/json',
      ),
    },
    { weight: 1, arbitrary: fc.constant(undefined) },
  );

/** Media types the contract names for each form; other spellings of them are left open. */
function mediaVerdict(contentTypeValue: string | undefined, kind: 'json' | 'cloudevents'): Verdict {
  const exact =
    kind === 'json'
      ? ['application/json', 'application/json; charset=utf-8']
      : ['application/cloudevents+json', 'application/cloudevents+json; charset=utf-8'];
  if (contentTypeValue !== undefined && exact.includes(contentTypeValue)) return 'valid';
  // JSON has no charset parameter (RFC 8259): whether a declared non-UTF-8 charset is refused or ignored is open.
  const open =
    kind === 'json'
      ? ['APPLICATION/JSON', 'application/json;charset=utf-8', 'application/json; charset=utf-16', 'application/json; charset=latin1']
      : [];
  return contentTypeValue !== undefined && open.includes(contentTypeValue) ? 'maybe' : 'invalid';
}

/** What happens to the body on the wire after it is serialized. */
type Wire =
  | { kind: 'as-is' }
  | { kind: 'pad'; bytes: number }
  | { kind: 'truncate'; at: number }
  | { kind: 'replace'; text: string }
  | { kind: 'bom' }
  | { kind: 'raw-control' }
  | { kind: 'invalid-utf8' };

const wire: fc.Arbitrary<Wire> = fc.oneof(
  { weight: 24, arbitrary: fc.constant({ kind: 'as-is' as const }) },
  {
    weight: 2,
    arbitrary: fc.record({ kind: fc.constant('pad' as const), bytes: fc.constantFrom(1, 100, 60_000, BODY_LIMIT_BYTES, 70_000, 200_000) }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('truncate' as const), at: fc.nat() }) },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('replace' as const),
      text: fc.oneof(
        fc.string({ unit: 'binary', maxLength: 200 }),
        fc.json(),
        fc.constantFrom(
          '',
          'null',
          '[]',
          '{}',
          '"data"',
          '123',
          '{"data":',
          '{"data":{}}}',
          '{"a":1,}',
          "{'data':1}",
          'NaN',
          '{"data": undefined}',
          '['.repeat(5000) + ']'.repeat(5000),
          '{"constructor":{"prototype":{"x":1}}}',
        ),
      ),
    }),
  },
  { weight: 1, arbitrary: fc.constantFrom({ kind: 'bom' as const }, { kind: 'raw-control' as const }, { kind: 'invalid-utf8' as const }) },
);

/** Applies the wire mutation; returns the payload and what it does to validity. */
function onTheWire(text: string, w: Wire): { payload: string | Buffer; verdict: Verdict; text: string } {
  switch (w.kind) {
    case 'as-is':
      return { payload: text, verdict: 'valid', text };
    case 'pad': {
      // Leading whitespace keeps the JSON what it was; only the size changes.
      const padded = ' '.repeat(w.bytes) + text;
      return { payload: padded, verdict: Buffer.byteLength(padded) > BODY_LIMIT_BYTES ? 'invalid' : 'valid', text: padded };
    }
    case 'truncate': {
      const at = w.at % Math.max(text.length, 1);
      return { payload: text.slice(0, at), verdict: 'invalid', text: text.slice(0, at) };
    }
    case 'replace':
      return { payload: w.text, verdict: 'invalid', text: w.text };
    case 'bom':
      return { payload: `\ufeff${text}`, verdict: 'maybe', text: `\ufeff${text}` };
    case 'raw-control': {
      // A raw control character inside a string is not JSON.
      const i = text.indexOf('":"');
      return i < 0
        ? { payload: text, verdict: 'valid', text }
        : { payload: `${text.slice(0, i + 3)}\u0001${text.slice(i + 3)}`, verdict: 'invalid', text: '' };
    }
    case 'invalid-utf8':
      return {
        payload: Buffer.concat([Buffer.from(text.slice(0, -1)), Buffer.from([0xff, 0xfe]), Buffer.from(text.slice(-1))]),
        verdict: 'maybe',
        text: '',
      };
  }
}

const extraHeaders = fc.dictionary(fc.stringMatching(/^x-[a-z0-9-]{1,20}$/), headerText, { maxKeys: 3 });

/** How a command carries its key and, when signed, its signature. */
interface Carriage {
  places: { body: boolean; header: boolean; webhook: boolean };
  quoted: boolean;
  conflict: 'none' | 'header' | 'webhook' | 'body';
  duplicateHeader: boolean;
  signature: 'valid' | 'none' | 'wrong-secret' | 'stale' | 'garbage' | 'tampered-body';
}

const carriage: fc.Arbitrary<Carriage> = fc.record({
  places: fc.record({ body: fc.constantFrom(true, true, false), header: fc.boolean(), webhook: fc.boolean() }),
  quoted: fc.boolean(),
  conflict: fc.oneof(
    { weight: 20, arbitrary: fc.constant('none' as const) },
    { weight: 1, arbitrary: fc.constantFrom('header' as const, 'webhook' as const, 'body' as const) },
  ),
  duplicateHeader: fc.oneof({ weight: 15, arbitrary: fc.constant(false) }, { weight: 1, arbitrary: fc.constant(true) }),
  signature: fc.oneof(
    { weight: 12, arbitrary: fc.constant('valid' as const) },
    {
      weight: 1,
      arbitrary: fc.constantFrom('none' as const, 'wrong-secret' as const, 'stale' as const, 'garbage' as const, 'tampered-body' as const),
    },
  ),
});

/** A header value as the Idempotency-Key header would carry it: bare, or an RFC 8941 string. */
function asHeader(key: string, quoted: boolean): string {
  return quoted ? `"${key.replace(/[\\"]/g, (c) => `\\${c}`)}"` : key;
}

/** A lone surrogate cannot be percent-encoded (URIError); on the wire it would be U+FFFD anyway. */
const wellFormed = (s: string) => s.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, '\ufffd');

const headerSafe = (v: unknown) => typeof v === 'string' && /^[\t\x20-\x7e\x80-\xff]*$/.test(v);

interface Built {
  inject: InjectOptions & { url: string };
  verdict: Verdict;
  /** 4xx problem types a valid request may still get (a refusal that is part of the contract). */
  allowed: string[];
  label: string;
}

const gen = (books: string[], orders: string[]) => {
  const route = fc.constantFrom('placed', 'placed', 'cancelled', 'cancelled', 'email');
  const envelopeCommand = fc.record({
    shape: fc.constant('envelope' as const),
    route,
    key: keyShape,
    type: fc.oneof(
      { weight: 6, arbitrary: fc.constant(undefined) },
      { weight: 6, arbitrary: fc.constant('OrderPlaced') },
      { weight: 2, arbitrary: fc.oneof(anyText, fc.integer()) },
    ),
    timestamp: fc.oneof({ weight: 8, arbitrary: fc.constant(undefined) }, { weight: 2, arbitrary: timestamp }),
    placed: orderPlacedData(books, orders),
    cancelled: orderCancelledData(books, orders),
    email: emailData(books, orders),
    extraTop: fc.oneof(
      { weight: 10, arbitrary: fc.constant(undefined) },
      { weight: 1, arbitrary: fc.dictionary(fc.string({ maxLength: 10 }), fc.jsonValue(), { minKeys: 1, maxKeys: 2 }) },
    ),
    contentType: contentType('json'),
    carriage,
    wire,
    headers: extraHeaders,
  });
  const cloudEventCommand = fc.record({
    shape: fc.constantFrom('ce-structured' as const, 'ce-binary' as const),
    route,
    id: fc.oneof({ weight: 5, arbitrary: fc.stringMatching(/^[\x21-\x7E]{0,30}$/) }, { weight: 2, arbitrary: anyText }),
    source: fc.oneof(
      { weight: 5, arbitrary: fc.constantFrom('urn:fuzz', 'https://ordering.example/orders', '/ordering') },
      { weight: 2, arbitrary: anyText },
    ),
    ceType: fc.oneof({ weight: 5, arbitrary: fc.constant('bookstore.order-placed') }, { weight: 1, arbitrary: anyText }),
    specversion: fc.oneof(
      { weight: 8, arbitrary: fc.constant('1.0') },
      { weight: 1, arbitrary: fc.constantFrom('0.3', '1', '', '1.0 ', '2.0') },
    ),
    extension: fc.oneof(
      { weight: 6, arbitrary: fc.constant(undefined) },
      {
        weight: 1,
        arbitrary: fc.tuple(
          fc.stringMatching(/^[a-zA-Z0-9_]{0,22}$/),
          fc.oneof(fc.string(), fc.integer(), fc.boolean(), fc.double(), fc.constant(null)),
        ),
      },
    ),
    placed: orderPlacedData(books, orders),
    cancelled: orderCancelledData(books, orders),
    email: emailData(books, orders),
    contentType: fc.constantFrom(true, true, true, false),
    wrongCt: contentType('json'),
    carriage,
    wire,
    headers: extraHeaders,
  });
  const putStock = fc.record({
    shape: fc.constant('put-stock' as const),
    bookId: fc.oneof({ weight: 3, arbitrary: uuidLike(books) }, { weight: 3, arbitrary: fc.uuid() }),
    title: fc.oneof(
      { weight: 4, arbitrary: fc.string({ minLength: 1, maxLength: 40 }) },
      { weight: 3, arbitrary: anyText },
      { weight: 1, arbitrary: fc.constantFrom('t'.repeat(300), 't'.repeat(301), '📚'.repeat(300), '📚'.repeat(301)) },
      { weight: 1, arbitrary: fc.oneof(fc.integer(), fc.constant(null)) },
    ),
    onHand: numberish(0, 1_000_000_000),
    tamper: fc.oneof(
      { weight: 8, arbitrary: fc.constant('none') },
      { weight: 1, arbitrary: fc.constantFrom('drop-title', 'drop-onHand', 'extra') },
    ),
    auth: fc.oneof(
      { weight: 8, arbitrary: fc.constant(`Bearer ${ADMIN_TOKEN}`) },
      {
        weight: 1,
        arbitrary: fc.oneof(
          fc.constant(undefined),
          fc.constantFrom(`bearer ${ADMIN_TOKEN}`, `Bearer ${ADMIN_TOKEN} `, 'Bearer', 'Basic YWRtaW46YWRtaW4=', `Bearer ${ADMIN_TOKEN}x`),
          headerText.map((t) => `Bearer ${t}`),
        ),
      },
    ),
    contentType: contentType('json'),
    wire,
  });
  const stray = fc.record({
    shape: fc.constant('stray' as const),
    method: fc.constantFrom('POST', 'PUT', 'PATCH', 'DELETE'),
    url: fc.constantFrom(
      '/inventory/order-placed/',
      '/Inventory/order-placed',
      '/inventory/order-placed/x',
      '/inventory//order-placed',
      '/stock/%ZZ',
      '/stock/',
      '/inventory',
      '/%00',
      '/inventory/order-placed%00',
    ),
    body: fc.option(fc.json(), { nil: undefined }),
  });
  const query = fc.oneof(
    { weight: 10, arbitrary: fc.constant('') },
    { weight: 1, arbitrary: fc.constantFrom('?x=1', '?messageId=a&data=1', '?', '?%ZZ', `?${'q'.repeat(3000)}`) },
  );
  return fc.tuple(
    fc.oneof(
      { weight: 6, arbitrary: envelopeCommand },
      { weight: 3, arbitrary: cloudEventCommand },
      { weight: 3, arbitrary: putStock },
      { weight: 1, arbitrary: stray },
    ),
    query,
  );
};

type Generated = ReturnType<typeof gen> extends fc.Arbitrary<infer T> ? T : never;

/** Turns a generated case into a request and the oracle's verdict on it. */
function build([g, query]: Generated, nonce: string, signed: boolean): Built {
  if (g.shape === 'stray') {
    return {
      inject: {
        method: g.method,
        url: g.url,
        headers: { 'content-type': 'application/json' },
        ...(g.body === undefined ? {} : { payload: g.body }),
      },
      verdict: 'invalid',
      allowed: [],
      label: `stray ${g.method} ${g.url}`,
    };
  }
  if (g.shape === 'put-stock') {
    const body: Record<string, unknown> = { title: g.title, onHand: g.onHand };
    if (g.tamper === 'drop-title') delete body.title;
    if (g.tamper === 'drop-onHand') delete body.onHand;
    if (g.tamper === 'extra') body.reserved = 0;
    const text = serialize(body);
    const sent = onTheWire(text, g.wire);
    const value = JSON.parse(text) as Record<string, unknown>;
    const bodyOk =
      onlyKeys(value, ['title', 'onHand']) &&
      validString(value.title, 1, 300) &&
      validInt(value.onHand, 0, 1_000_000_000) &&
      !hasNul(value);
    const authOk = typeof g.auth === 'string' && /^Bearer (.+)$/i.exec(g.auth)?.[1] === ADMIN_TOKEN;
    const paramOk = typeof g.bookId === 'string' && UUID.test(g.bookId);
    const headers: Record<string, string> = {};
    if (g.contentType !== undefined) headers['content-type'] = g.contentType;
    if (g.auth !== undefined) headers.authorization = g.auth;
    return {
      inject: { method: 'PUT', url: `/stock/${encodeURIComponent(wellFormed(String(g.bookId)))}${query}`, headers, payload: sent.payload },
      // The admin route shares the command routes' parsers; whether it refuses the CloudEvents media type is open.
      verdict: worst(
        bodyOk ? 'valid' : 'invalid',
        authOk ? 'valid' : 'invalid',
        paramOk ? 'valid' : 'invalid',
        g.contentType?.startsWith('application/cloudevents+json') ? 'maybe' : mediaVerdict(g.contentType, 'json'),
        sent.verdict,
        query === '' || query === '?x=1' || query === '?' ? 'valid' : 'maybe',
      ),
      allowed: ['stock-below-reserved'],
      label: `PUT /stock/${String(g.bookId).slice(0, 60)}`,
    };
  }

  const { url, data, dataValid } = {
    placed: { url: '/inventory/order-placed', data: g.placed, dataValid: orderPlacedValid },
    cancelled: { url: '/inventory/order-cancelled', data: g.cancelled, dataValid: orderCancelledValid },
    email: { url: '/notifications/stock-reserved-email', data: g.email, dataValid: emailDataValid },
  }[g.route];
  const headers: Record<string, string | string[]> = { ...g.headers };
  const c = g.carriage;
  let body: Record<string, unknown>;
  let keyText: string;

  if (g.shape === 'envelope') {
    const key = keyValue(g.key, nonce);
    // In a header the value is text; with the nonce it is a new key there too.
    keyText = typeof key === 'string' ? key : `${nonce}${JSON.stringify(key)}`;
    body = { ...(g.extraTop ?? {}), data };
    if (c.places.body) body.messageId = key;
    if (g.type !== undefined) body.type = g.type;
    if (g.timestamp !== undefined) body.timestamp = g.timestamp;
    if (g.contentType !== undefined) headers['content-type'] = g.contentType;
  } else {
    // A non-empty id gets the nonce in front, so even a long or odd id names a new event.
    const id = typeof g.id === 'string' && g.id !== '' ? `${nonce}${g.id}` : g.id;
    keyText = typeof id === 'string' && typeof g.source === 'string' ? cloudEventKey(g.source, id) : `${nonce}-ce`;
    if (g.shape === 'ce-structured') {
      body = { specversion: g.specversion, id, source: g.source, type: g.ceType, data };
      if (g.extension !== undefined) body[g.extension[0]] = g.extension[1];
      const ct = g.contentType ? 'application/cloudevents+json' : g.wrongCt;
      if (ct !== undefined) headers['content-type'] = ct;
    } else {
      body = data;
      const ce = { 'ce-specversion': g.specversion, 'ce-id': id, 'ce-source': g.source, 'ce-type': g.ceType };
      for (const [name, value] of Object.entries(ce)) if (headerSafe(value)) headers[name] = value;
      headers['content-type'] = g.contentType ? 'application/json' : (g.wrongCt ?? 'application/json');
    }
  }

  // The same key in more places, or deliberately another one in one of them.
  const other = `${nonce}-other`;
  if (c.places.header || c.conflict === 'header') {
    const value = c.conflict === 'header' ? other : keyText;
    if (headerSafe(value))
      headers['idempotency-key'] = c.duplicateHeader ? [asHeader(value, c.quoted), asHeader(value, c.quoted)] : asHeader(value, c.quoted);
  }
  if (c.places.webhook || c.conflict === 'webhook' || (signed && c.signature !== 'none')) {
    const value = c.conflict === 'webhook' ? other : keyText;
    if (headerSafe(value)) headers['webhook-id'] = value;
  }
  if (c.conflict === 'body' && g.shape === 'envelope') body.messageId = other;

  const text = serialize(body);
  const sent = onTheWire(text, g.wire);
  // What the service sees once it parses the body: the verdicts read this, never the generator's intent.
  const value = JSON.parse(text) as Record<string, unknown>;
  let shape: Verdict;
  let media: Verdict;
  let cloudEvent: { source: string; id: string } | undefined;
  if (g.shape === 'envelope') {
    shape = envelopeVerdict(value, dataValid);
    media = mediaVerdict(headers['content-type'] as string | undefined, 'json');
  } else if (g.shape === 'ce-structured') {
    shape = cloudEventVerdict(value, dataValid);
    media = mediaVerdict(headers['content-type'] as string | undefined, 'cloudevents');
    if (shape === 'valid') cloudEvent = { source: value.source as string, id: value.id as string };
  } else {
    const ce = ['ce-specversion', 'ce-id', 'ce-source', 'ce-type'].map((h) => headers[h]);
    const complete = ce.every((v) => typeof v === 'string' && v !== '') && headers['ce-specversion'] === '1.0';
    shape = complete && dataValid(value) ? 'valid' : 'invalid';
    media = mediaVerdict(headers['content-type'] as string, 'json');
    if (complete) cloudEvent = { source: headers['ce-source'] as string, id: headers['ce-id'] as string };
  }

  let signature: Verdict = 'valid';
  if (signed) {
    const id = headers['webhook-id'];
    if (typeof id !== 'string' || c.signature === 'none') {
      signature = 'invalid';
    } else {
      const signedPayload = c.signature === 'tampered-body' ? `${sent.text} ` : sent.text;
      const when = c.signature === 'stale' ? new Date(Date.now() - 3_600_000) : new Date();
      headers['webhook-timestamp'] = String(Math.floor(when.getTime() / 1000));
      headers['webhook-signature'] =
        c.signature === 'garbage'
          ? 'v1,not-base64!!'
          : c.signature === 'wrong-secret'
            ? new Webhook('whsec_aGVsbG8gd29ybGQgdGhpcyBpcyB3cm9uZw==').sign(id, when, signedPayload)
            : signer.sign(id, when, signedPayload);
      // Bytes that are not UTF-8 reach the verifier decoded, so their signature is left open.
      signature = c.signature === 'valid' ? (g.wire.kind === 'invalid-utf8' ? 'maybe' : 'valid') : 'invalid';
    }
  }

  const keys = keyVerdict(headers, cloudEvent, g.shape === 'envelope' ? value.messageId : undefined);
  const duplicate: Verdict = Array.isArray(headers['idempotency-key']) ? 'invalid' : 'valid';
  return {
    inject: { method: 'POST', url: `${url}${query}`, headers, payload: sent.payload },
    verdict: worst(
      shape,
      media,
      keys,
      sent.verdict,
      signature,
      duplicate,
      hasNul(value) ? 'invalid' : 'valid',
      ['', '?x=1', '?', '?messageId=a&data=1'].includes(query) ? 'valid' : 'maybe',
    ),
    allowed: [],
    label: `${g.shape} ${url}`,
  };
}

// ---------------------------------------------------------------------------------------------
// The property

/** What "nothing changed" compares: row counts and every book's figures. */
async function snapshot(db: Db): Promise<string> {
  const counts = await tableCounts(db);
  const stock = await db.selectFrom('stock_items').select(['book_id', 'title', 'on_hand', 'reserved']).orderBy('book_id').execute();
  const reserved = await db
    .selectFrom('stock_reservations')
    .select(sql<number>`count(*)`.as('live'))
    .where('released_at', 'is', null)
    .executeTakeFirstOrThrow();
  return JSON.stringify({ counts, stock, live: Number(reserved.live) });
}

function describeCase(built: Built, res: LightMyRequestResponse): string {
  const payload = built.inject.payload;
  const shown =
    typeof payload === 'string'
      ? payload.slice(0, 500)
      : Buffer.isBuffer(payload)
        ? `<${payload.length} bytes>`
        : JSON.stringify(payload)?.slice(0, 500);
  return `${built.label} (${built.verdict}) -> ${res.statusCode} ${res.body.slice(0, 300)}\nrequest: ${built.inject.method} ${built.inject.url.slice(0, 200)} ${JSON.stringify(built.inject.headers).slice(0, 600)}\nbody: ${shown}`;
}

// Not SQL Server: it was not at hand where this was written, and its nvarchar(n) counts UTF-16 units
// where the schemas count code points, which this oracle does not model.
reportMissingDatabases((name) => `fuzzing the HTTP API on ${name}`, ['postgres']);
for (const target of testDatabases.filter((d) => d.name !== 'mssql')) {
  for (const signed of [false, true]) {
    const runs = signed ? Math.max(20, Math.ceil(RUNS / 3)) : RUNS;
    describe(`fuzzing the HTTP API on ${target.name}${signed ? ', WEBHOOK_SECRET set' : ''}`, { timeout: 600_000 }, () => {
      let database: TestDatabaseHandle;
      let app: FastifyInstance;
      const books: string[] = [];
      const orders = Array.from({ length: 6 }, () => newId());

      // The email route's log provider writes each email to a file: a throwaway one.
      const emailDir = mkdtempSync(join(tmpdir(), 'fuzz-email-'));

      before(async () => {
        database = await target.open();
        app = await testApp(database, {
          config: { emailLogFile: join(emailDir, 'emails.jsonl'), ...(signed ? { webhookSecret: SECRET } : {}) },
        });
        for (let i = 0; i < 3; i++) books.push(await seedBook(app, 40));
      });
      after(async () => {
        await app?.close();
        await database?.close();
        rmSync(emailDir, { recursive: true, force: true });
      });

      test(`${runs} generated requests: 2xx only for a valid command, otherwise a 4xx problem; never 5xx; a 4xx changes nothing`, async (t) => {
        let caseNo = 0;
        const tally = { valid: 0, invalid: 0, maybe: 0, s2xx: 0, s4xx: 0 };
        const property = fc.asyncProperty(gen(books, orders), async (generated) => {
          const built = build(generated, `f${++caseNo}-`, signed);
          tally[built.verdict]++;
          // Taken for every case: a failed case (and fast-check's shrinking replays) may have written.
          const before = await snapshot(database.db);
          const res = await app.inject(built.inject);
          const why = () => describeCase(built, res);
          assert.ok(res.statusCode < 500, `a 5xx for a client's request: ${why()}`);
          if (res.statusCode >= 200 && res.statusCode < 300) {
            tally.s2xx++;
            assert.notEqual(built.verdict, 'invalid', `2xx for an invalid request: ${why()}`);
            return;
          }
          assert.ok(res.statusCode >= 400, `neither 2xx nor 4xx: ${why()}`);
          tally.s4xx++;
          assert.match(String(res.headers['content-type']), /^application\/problem\+json/, why());
          const problem = JSON.parse(res.body) as { type?: unknown; title?: unknown; status?: unknown };
          assert.equal(typeof problem.type, 'string', why());
          assert.equal(typeof problem.title, 'string', why());
          assert.equal(problem.status, res.statusCode, why());
          if (built.verdict === 'valid') {
            assert.ok(
              built.allowed.some((slug) => problem.type === `/problems/${slug}`),
              `4xx for a valid request: ${why()}`,
            );
          }
          assert.equal(await snapshot(database.db), before, `the database changed after a ${res.statusCode}: ${why()}`);
        });
        try {
          await fc.assert(property, { numRuns: runs, ...(SEED === undefined ? {} : { seed: SEED }) });
        } catch (error) {
          // fast-check keeps the failed assertion as the cause; the runner would print only the counterexample.
          const cause = (error as { cause?: unknown }).cause;
          if (error instanceof Error && cause instanceof Error) error.message += `\n${cause.message}`;
          throw error;
        }
        t.diagnostic(`cases: ${JSON.stringify(tally)}`);
        // A generator that never produces valid (or invalid) requests would make the property vacuous.
        assert.ok(
          tally.valid > runs / 10 && tally.invalid > runs / 10 && tally.s2xx > 0 && tally.s4xx > 0,
          `lopsided cases: ${JSON.stringify(tally)}`,
        );
      });
    });
  }
}

/** A time a query might carry: ordinary, a leap second, out of any database's range, or not a time. */
const queryTime = fc.oneof(
  fc
    .date({ min: new Date('1970-01-01T00:00:00Z'), max: new Date('9999-12-31T23:59:59Z'), noInvalidDate: true })
    .map((d) => d.toISOString()),
  fc.constantFrom('2016-12-31T23:59:60Z', '0000-01-01T00:00:00Z', '9999-12-31T23:59:59-10:00', '+275760-09-13T00:00:00.000Z', 'now'),
  anyText,
);

/** An `after` cursor: base64url JSON of parts that may hold NULs, control characters or impossible times. */
const inboxCursor = fc.oneof(
  fc.tuple(queryTime, anyText, anyText).map((parts) => Buffer.from(JSON.stringify(parts)).toString('base64url')),
  anyText,
);

const q = (params: Record<string, string | undefined>) => {
  const entries = Object.entries(params).filter((e): e is [string, string] => e[1] !== undefined);
  return entries.length === 0 ? '' : `?${new URLSearchParams(entries).toString()}`;
};
const optional = <T>(arb: fc.Arbitrary<T>) => fc.option(arb, { nil: undefined });
/** Percent-encoded for a path segment; a lone surrogate (which has no UTF-8) goes as the bytes of one. */
const segment = (text: string) => {
  try {
    return encodeURIComponent(text);
  } catch {
    return '%ED%A0%80';
  }
};

/** Admin reads with parameters a client controls: every one of them reaches the database when it validates. */
const adminRead: fc.Arbitrary<string> = fc.oneof(
  fc
    .record({ consumer: optional(anyText), olderThan: optional(queryTime), after: optional(inboxCursor), state: optional(anyText) })
    .map((p) => `/inbox${q(p)}`),
  fc.tuple(anyText, anyText).map(([consumer, key]) => `/inbox/${segment(consumer)}/${segment(key)}`),
  fc.record({ consumer: optional(anyText), after: optional(anyText) }).map((p) => `/dead-letters${q(p)}`),
  anyText.map((id) => `/dead-letters/${segment(id)}`),
  fc.record({ state: optional(anyText), after: optional(anyText) }).map((p) => `/outbox${q(p)}`),
  optional(anyText).map((after) => `/stock${q({ after })}`),
);

reportMissingDatabases((name) => `fuzzing the admin reads on ${name}`, ['postgres']);
for (const target of testDatabases.filter((d) => d.name !== 'mssql')) {
  describe(`fuzzing the admin reads on ${target.name}`, { timeout: 600_000 }, () => {
    let database: TestDatabaseHandle;
    let app: FastifyInstance;

    before(async () => {
      database = await target.open();
      app = await testApp(database);
    });
    after(async () => {
      await app?.close();
      await database?.close();
    });

    test(`${RUNS} generated admin reads: 200 or a 4xx problem, never 5xx, nothing written`, async () => {
      const before = await tableCounts(database.db);
      const property = fc.asyncProperty(adminRead, async (url) => {
        const res = await app.inject({ url, headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
        assert.ok(res.statusCode < 500, `a 5xx for GET ${url}: ${res.body}`);
        if (res.statusCode !== 200) {
          assert.ok(res.statusCode >= 400, `GET ${url}: ${res.statusCode}`);
          assert.match(String(res.headers['content-type']), /^application\/problem\+json/, `GET ${url}`);
        }
      });
      await fc.assert(property, { numRuns: RUNS, ...(SEED === undefined ? {} : { seed: SEED }) });
      assert.deepEqual(await tableCounts(database.db), before);
    });
  });
}
