import autocannon, { type RequestSpec } from 'autocannon';
import type { EventEmitter } from 'node:events';
import { bookId, BOOKS } from './postgres.js';
import { percentile } from './stats.js';

/**
 * Message generators and the load driver. Every request's status is checked against what the
 * scenario expects; anything else counts as an error and fails the cell.
 */

export type Expect = 'created' | 'replayed' | 'either';

export interface Message {
  id: string;
  body: string;
  expect: Expect;
}

/** Makes the next message to send; called once per request, just before it is written. */
export type Generator = () => Message;

export interface LoadResult {
  /** Answered requests with an expected status, per second of the run. */
  messagesPerSec: number;
  answered: number;
  p50Ms: number;
  p99Ms: number;
  /** Unexpected statuses + transport errors + timeouts + exactly-once violations. */
  errors: number;
  statuses: Record<string, number>;
  unexpected: Record<string, number>;
  transportErrors: number;
  timeouts: number;
  /** Messages that were answered 201 more than once (must be 0: exactly once). */
  doubleProcessed: number;
  /** Requests built and sent, or about to be: those beyond the answers were cut off when the cell ended. */
  sent: number;
  /** With `overload`: 503 `/problems/overloaded` answers with Retry-After (expected there, not errors). */
  shed: number;
  /** The message ids of those answers (to check that nothing was recorded for them). */
  shedIds: string[];
  /** With `overload`: the p99 latency of the 201 answers alone. */
  p99CreatedMs: number;
  /**
   * With `overload`: the same two without each connection's first answer, whose time includes opening
   * the connection (at 1,000 connections, beyond the server's listen backlog, a SYN waits to be retried).
   */
  p99SteadyMs: number;
  p99CreatedSteadyMs: number;
  seconds: number;
  ok: boolean;
}

/** The service's order-placed envelope, as JSON text. */
export function orderPlacedBody(messageId: string, orderId: string, book: number): string {
  return `{"messageId":"${messageId}","type":"OrderPlaced","data":{"orderId":"${orderId}","bookId":"${bookId(book)}","quantity":1}}`;
}

/** A uuid made from a run-unique prefix and a counter: unique, valid, and cheap to make. */
export function orderId(prefix8: string, n: number): string {
  return `${prefix8}-0000-4000-8000-${n.toString(16).padStart(12, '0')}`;
}

/** Ids unique across the whole run: every generator gets its own prefix. */
export class Keys {
  private generators = 0;
  constructor(private readonly runTag: string) {}
  next(label: string): { messagePrefix: string; orderPrefix: string } {
    const g = ++this.generators;
    return {
      messagePrefix: `${this.runTag}-${label}-${g}`,
      orderPrefix: ((parseInt(this.runTag.slice(0, 6), 16) * 256 + g) >>> 0).toString(16).padStart(8, '0'),
    };
  }
}

/** (1) and (5): unique messages spread over the books. (3): the same with books = 1. */
export function uniqueMessages(keys: Keys, label: string, books = BOOKS): Generator {
  const { messagePrefix, orderPrefix } = keys.next(label);
  let n = 0;
  return () => {
    n++;
    const id = `${messagePrefix}-${n}`;
    const book = books === 1 ? 1 : 1 + Math.floor(Math.random() * books);
    return { id, body: orderPlacedBody(id, orderId(orderPrefix, n), book), expect: 'created' };
  };
}

/** A pool of messages to process once, then to send again as duplicates. */
export function duplicatePool(keys: Keys, size: number): { seed: Generator; replayAll: Generator; duplicates: Generator } {
  const { messagePrefix, orderPrefix } = keys.next('dup');
  const bodies: Message[] = [];
  for (let i = 1; i <= size; i++) {
    const id = `${messagePrefix}-${i}`;
    bodies.push({ id, body: orderPlacedBody(id, orderId(orderPrefix, i), 1 + (i % BOOKS)), expect: 'created' });
  }
  let seeded = 0;
  let replayed = 0;
  return {
    seed: () => bodies[seeded++ % size]!,
    // Every message once more, in order: a server that did not seed the pool answers each key once.
    replayAll: () => ({ ...bodies[replayed++ % size]!, expect: 'replayed' }),
    duplicates: () => {
      const m = bodies[Math.floor(Math.random() * size)]!;
      return { ...m, expect: 'replayed' };
    },
  };
}

/**
 * (4): 70% unique, 30% duplicates. A duplicate is a copy of a message generated moments earlier,
 * sent by the next free connection, so at concurrency > 1 it is in flight together with its original.
 * Either copy may win; exactly one of them must be answered 201.
 */
export function mixedMessages(keys: Keys, label: string): Generator {
  const unique = uniqueMessages(keys, label);
  const pending: Message[] = [];
  return () => {
    const dup = pending.shift();
    if (dup !== undefined) return dup;
    const m = unique();
    const sent = { ...m, expect: 'either' as const };
    // 3/7 of unique messages get one copy: copies are 3 / (7 + 3) = 30% of all requests.
    if (Math.random() < 3 / 7) pending.push(sent);
    return sent;
  };
}

/** PUT /stock/{bookId} for every book: how the embedded (PGlite) service is seeded. */
export function stockPuts(adminToken: string, onHand: number): RequestSpec[] {
  let n = 0;
  return [
    {
      method: 'PUT',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${adminToken}` },
      setupRequest: (req) => {
        n++;
        return { ...req, path: `/stock/${bookId(n)}`, body: JSON.stringify({ title: `Book ${n}`, onHand }) };
      },
    },
  ];
}

interface Tracking {
  created: number;
  replayed: number;
}

/**
 * Drives POST /inventory/order-placed with autocannon for `seconds` (or `amount` requests) at a
 * concurrency, and checks every status: 201 where the message is new, 200 where it is a duplicate.
 */
export async function drive(
  baseUrl: string,
  generator: Generator,
  options: { connections: number; seconds?: number; amount?: number; path?: string; overload?: boolean },
): Promise<LoadResult> {
  const statuses: Record<string, number> = {};
  const unexpected: Record<string, number> = {};
  const perMessage = new Map<string, Tracking>();
  let answered = 0;
  let sent = 0;
  const shedIds: string[] = [];
  const latencies = new LatencyLog();
  const createdLatencies = new LatencyLog();
  const steadyLatencies = new LatencyLog();
  const createdSteadyLatencies = new LatencyLog();

  const check = (status: number, message: Message | undefined, body: string, headers: Record<string, string | string[]>) => {
    statuses[status] = (statuses[status] ?? 0) + 1;
    if (options.overload === true && status === 503 && message !== undefined && isOverloaded(body, headers)) {
      shedIds.push(message.id);
      return;
    }
    const good =
      message !== undefined &&
      ((message.expect === 'created' && status === 201) ||
        (message.expect === 'replayed' && status === 200) ||
        (message.expect === 'either' && (status === 201 || status === 200)));
    if (!good) {
      unexpected[status] = (unexpected[status] ?? 0) + 1;
      return;
    }
    answered++;
    if (message.expect === 'either') {
      const t = perMessage.get(message.id) ?? { created: 0, replayed: 0 };
      if (status === 201) t.created++;
      else t.replayed++;
      perMessage.set(message.id, t);
    }
  };

  const requests: RequestSpec[] = [
    {
      method: 'POST',
      path: options.path ?? '/inventory/order-placed',
      headers: { 'content-type': 'application/json' },
      setupRequest: (req, context) => {
        const m = generator();
        sent++;
        context.message = m;
        req.body = m.body;
        return req;
      },
      onResponse: (status, body, context, headers) => check(status, context.message as Message | undefined, body, headers),
    },
  ];

  const started = performance.now();
  const instance = autocannon({
    url: baseUrl,
    connections: options.connections,
    ...(options.amount !== undefined ? { amount: options.amount } : { duration: options.seconds ?? 10 }),
    timeout: 30,
    pipelining: 1,
    requests,
    ...(options.overload === true
      ? {
          setupClient: (client: EventEmitter) => {
            let answers = 0;
            client.on('response', (status: number, _bytes: number, ms: number) => {
              if (answers++ === 0) return;
              steadyLatencies.add(ms);
              if (status === 201) createdSteadyLatencies.add(ms);
            });
          },
        }
      : {}),
  });
  instance.on('response', (_client: unknown, status: number, _bytes: number, ms: number) => {
    latencies.add(ms);
    if (options.overload === true && status === 201) createdLatencies.add(ms);
  });
  const result = await instance;
  const seconds = options.amount !== undefined ? (performance.now() - started) / 1000 : result.duration;

  let doubleProcessed = 0;
  for (const t of perMessage.values()) if (t.created > 1) doubleProcessed++;

  const sorted = latencies.sorted();
  const unexpectedCount = Object.values(unexpected).reduce((a, b) => a + b, 0);
  const errors = unexpectedCount + result.errors + doubleProcessed;
  return {
    messagesPerSec: answered / seconds,
    answered,
    p50Ms: percentile(sorted, 50),
    p99Ms: percentile(sorted, 99),
    errors,
    statuses,
    unexpected,
    transportErrors: result.errors,
    timeouts: result.timeouts,
    doubleProcessed,
    sent,
    shed: shedIds.length,
    shedIds,
    p99CreatedMs: percentile(createdLatencies.sorted(), 99),
    p99SteadyMs: percentile(steadyLatencies.sorted(), 99),
    p99CreatedSteadyMs: percentile(createdSteadyLatencies.sorted(), 99),
    seconds,
    ok: errors === 0 && answered > 0,
  };
}

/** A 503 that sheds load: problem type /problems/overloaded, with Retry-After. */
function isOverloaded(body: string, headers: Record<string, string | string[]>): boolean {
  const retryAfter = Object.keys(headers).some((k) => k.toLowerCase() === 'retry-after');
  try {
    const type = (JSON.parse(body) as { type?: unknown }).type;
    return retryAfter && typeof type === 'string' && type.endsWith('/problems/overloaded');
  } catch {
    return false;
  }
}

/** Response times in ms, in a growing typed array. */
class LatencyLog {
  private values = new Float64Array(1 << 16);
  private count = 0;
  add(ms: number): void {
    if (this.count === this.values.length) {
      const bigger = new Float64Array(this.values.length * 2);
      bigger.set(this.values);
      this.values = bigger;
    }
    this.values[this.count++] = ms;
  }
  sorted(): Float64Array {
    return this.values.subarray(0, this.count).sort();
  }
}

/** Runs raw autocannon requests (seeding); fails unless every answer is 2xx. */
export async function driveRequests(baseUrl: string, requests: RequestSpec[], connections: number, amount: number): Promise<void> {
  const result = await autocannon({ url: baseUrl, connections, amount, timeout: 30, requests });
  if (result.non2xx > 0 || result.errors > 0) {
    throw new Error(`seeding failed: ${JSON.stringify(result.statusCodeStats)}, ${result.errors} errors`);
  }
}
