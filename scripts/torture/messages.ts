/** The HTTP mode's messages in their five forms, and the clients' model of what each acknowledgement must mean. */
import canonicalize from 'canonicalize';
import type { Answer } from './http-client.js';
import { violation } from './log.js';
import { stats } from './report.js';

export const RESERVE = 'inventory.reserve-stock';
export const RELEASE = 'inventory.release-stock';
const CE_SOURCE = 'urn:torture';

export type Form = 'body' | 'idempotency-key' | 'both' | 'cloudevent-structured' | 'cloudevent-binary';

export interface OrderPlacedData {
  orderId: string;
  bookId: string;
  quantity: number;
}
export interface OrderCancelledData {
  orderId: string;
  bookId?: string;
}

/** A recorded outcome, as far as the checks read it. */
export interface Outcome {
  result?: string;
  orderId?: string;
  bookId?: string;
  quantity?: number;
  available?: number;
  existing?: { reservedBy?: string; quantity?: number; released?: boolean };
  released?: { bookId: string; quantity: number }[];
}

/** The body of a 2xx answer to a message. */
export interface AckBody {
  status?: string;
  messageId?: string;
  consumer?: string;
  receivedAt?: string;
  processedAt?: string;
  outcome: Outcome;
}

interface Ack {
  httpStatus: number;
  body: AckBody;
}

export interface Message {
  client: number;
  id: string;
  /** The inbox key the service derives from the chosen form. */
  key: string;
  consumer: typeof RESERVE | typeof RELEASE;
  form: Form;
  data: OrderPlacedData | OrderCancelledData;
  acks: Ack[];
}

/** One line of an order (order, book) as a client knows it, from the outcomes it was acknowledged. */
export interface Line {
  orderId: string;
  bookId: string;
  quantity: number;
  state: 'none' | 'reserved' | 'released';
  reservedBy?: string;
  releasedBy?: string;
}

/** Every message any client sent, and every order line, for the checks after the run. */
export const allMessages: Message[] = [];
export const allLines = new Map<string, Line>();
export const lineKey = (orderId: string, bookId: string): string => `${orderId}/${bookId}`;
/** Acknowledged cancellations: an order id (the whole order) or a line key (one book of it). */
export const cancellations = new Set<string>();

export const same = (a: unknown, b: unknown): boolean => canonicalize(a) === canonicalize(b);

export function routeOf(message: Message): string {
  return message.consumer === RESERVE ? '/inventory/order-placed' : '/inventory/order-cancelled';
}

function messageType(message: Message): string {
  return message.consumer === RESERVE ? 'bookstore.order-placed' : 'bookstore.order-cancelled';
}

/** The request for one delivery of a message in its form; every delivery of a message is byte-identical. */
export function requestOf(message: Message): { headers: Record<string, string>; body: string } {
  const json = { 'content-type': 'application/json' };
  switch (message.form) {
    case 'body':
      return { headers: json, body: JSON.stringify({ messageId: message.id, type: messageType(message), data: message.data }) };
    case 'idempotency-key':
      // Half of them as an RFC 8941 string, which the service must read as the same key.
      return {
        headers: { ...json, 'idempotency-key': message.id.length % 2 === 0 ? `"${message.id}"` : message.id },
        body: JSON.stringify({ data: message.data }),
      };
    case 'both':
      return { headers: { ...json, 'idempotency-key': message.id }, body: JSON.stringify({ messageId: message.id, data: message.data }) };
    case 'cloudevent-structured':
      return {
        headers: { 'content-type': 'application/cloudevents+json' },
        body: JSON.stringify({ specversion: '1.0', id: message.id, source: CE_SOURCE, type: messageType(message), data: message.data }),
      };
    case 'cloudevent-binary':
      return {
        headers: { ...json, 'ce-specversion': '1.0', 'ce-id': message.id, 'ce-source': CE_SOURCE, 'ce-type': messageType(message) },
        body: JSON.stringify(message.data),
      };
  }
}

export function keyOf(id: string, form: Form): string {
  return form === 'cloudevent-structured' || form === 'cloudevent-binary' ? `${CE_SOURCE}|${id}` : id;
}

/** The outcome of a message's first acknowledgement; only called once the message was acknowledged. */
export function firstOutcome(message: Message): Outcome {
  const first = message.acks[0];
  if (first === undefined) throw new Error(`${message.consumer} ${message.key} was not acknowledged`);
  return first.body.outcome;
}

/**
 * Checks one acknowledgement against the message's earlier ones: one record, so the same outcome and
 * timestamps every time, and at most one 201 (two would mean the message took effect twice).
 */
export function recordAck(message: Message, answer: Answer): void {
  stats.acknowledgements++;
  const where = `${message.consumer} ${message.key}`;
  if (answer.status === 201) stats.processed201++;
  else stats.replayed200++;
  if (typeof answer.body !== 'object' || answer.body === null) {
    violation('ack-body', `${where}: ${answer.status} without a JSON body`);
    return;
  }
  const body = answer.body as AckBody;
  const expectedStatus = answer.status === 201 ? 'processed' : 'duplicate';
  if (body.status !== expectedStatus) violation('ack-body', `${where}: HTTP ${answer.status} with status "${body.status}"`);
  if (answer.status === 200 && !answer.replayed) violation('ack-body', `${where}: 200 without Idempotent-Replayed: true`);
  if (body.messageId !== message.key || body.consumer !== message.consumer) {
    violation('ack-body', `${where}: answered for ${body.consumer} ${body.messageId}`);
  }
  const first = message.acks[0];
  if (first !== undefined) {
    if (answer.status === 201 && message.acks.some((a) => a.httpStatus === 201)) {
      violation('processed-twice', `${where}: a second 201 (the message took effect twice)`);
    }
    if (!same(first.body.outcome, body.outcome)) {
      violation('replay-differs', `${where}: outcome ${canonicalize(body.outcome)} after ${canonicalize(first.body.outcome)}`);
    }
    if (first.body.receivedAt !== body.receivedAt || first.body.processedAt !== body.processedAt) {
      const times = `${body.receivedAt}/${body.processedAt}`;
      violation('replay-differs', `${where}: record times ${times} after ${first.body.receivedAt}/${first.body.processedAt}`);
    }
  }
  message.acks.push({ httpStatus: answer.status, body });
}

/** Applies the first acknowledged outcome of an order-placed to the client's model, checking it fits. */
export function applyReserve(message: Message, line: Line): void {
  const outcome = firstOutcome(message);
  const data = message.data as OrderPlacedData;
  const where = `${RESERVE} ${message.key} (${line.orderId}/${line.bookId}, state ${line.state})`;
  if (outcome.orderId !== data.orderId || outcome.bookId !== data.bookId || outcome.quantity !== data.quantity) {
    violation('wrong-outcome', `${where}: outcome for ${canonicalize(outcome)}`);
    return;
  }
  if (line.state === 'none') {
    if (cancellations.has(line.orderId) || cancellations.has(lineKey(line.orderId, line.bookId))) {
      // A cancellation acknowledged before this placement was sent wins over it.
      if (outcome.result !== 'order-cancelled') violation('wrong-outcome', `${where}: ${outcome.result} for a cancelled order line`);
      return;
    }
    if (outcome.result === 'reserved') {
      line.state = 'reserved';
      line.reservedBy = message.key;
    } else if (outcome.result === 'insufficient-stock') {
      const available = outcome.available;
      if (!(available !== undefined && available < data.quantity && available >= 0)) {
        violation('wrong-outcome', `${where}: insufficient-stock with ${available} available for ${data.quantity}`);
      }
    } else {
      violation('wrong-outcome', `${where}: ${outcome.result} for an order line that holds no reservation`);
    }
    return;
  }
  if (line.state === 'released') {
    // Released only by a cancellation: the order stays cancelled, and a later placement of the line is refused.
    if (outcome.result !== 'order-cancelled') violation('wrong-outcome', `${where}: ${outcome.result} for a cancelled order line`);
    return;
  }
  if (
    outcome.result !== 'already-reserved' ||
    outcome.existing?.reservedBy !== line.reservedBy ||
    outcome.existing?.quantity !== line.quantity ||
    outcome.existing?.released !== false
  ) {
    violation('wrong-outcome', `${where}: expected already-reserved by ${line.reservedBy}, got ${canonicalize(outcome)}`);
  }
}

/** Applies the first acknowledged outcome of an order-cancelled: exactly the live lines are released. */
export function applyRelease(message: Message, lines: readonly Line[]): void {
  const outcome = firstOutcome(message);
  const data = message.data;
  const live = lines
    .filter((l) => l.state === 'reserved' && (data.bookId === undefined || l.bookId === data.bookId))
    .sort((a, b) => (a.bookId < b.bookId ? -1 : 1));
  const expected =
    live.length === 0
      ? { result: 'not-reserved', orderId: data.orderId }
      : { result: 'released', orderId: data.orderId, released: live.map((l) => ({ bookId: l.bookId, quantity: l.quantity })) };
  if (!same(outcome, expected)) {
    violation('wrong-outcome', `${RELEASE} ${message.key}: expected ${canonicalize(expected)}, got ${canonicalize(outcome)}`);
    return;
  }
  for (const l of live) {
    l.state = 'released';
    l.releasedBy = message.key;
  }
  cancellations.add(data.bookId === undefined ? data.orderId : lineKey(data.orderId, data.bookId));
}
