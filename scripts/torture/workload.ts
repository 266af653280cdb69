/** The HTTP mode's workload: at-least-once clients sending orders and cancellations, and an operator restocking. */
import { setTimeout as sleep } from 'node:timers/promises';
import canonicalize from 'canonicalize';
import { mulberry32 } from '../seeded-random.js';
import { httpRequest, pickTarget, problemType } from './http-client.js';
import { violation } from './log.js';
import {
  allLines,
  allMessages,
  applyRelease,
  applyReserve,
  firstOutcome,
  keyOf,
  lineKey,
  recordAck,
  requestOf,
  RELEASE,
  RESERVE,
  routeOf,
  type Form,
  type Line,
  type Message,
} from './messages.js';
import type { Plan } from './plan.js';
import { between, pick, seededUuid, type Rng } from './random.js';
import { stats } from './report.js';
import { ADMIN_TOKEN, type Service } from './services.js';

/** Told of every acknowledgement: when its request was sent and when the answer came (recovery times after a fault). */
export const ackObservers: ((sentAt: number, answeredAt: number, status: number) => void)[] = [];

export interface ClientContext {
  plan: Plan;
  services: Service[];
  books: string[];
  trafficEnd: number;
  drainEnd: () => number;
}

export class Client {
  private seq = 0;
  private readonly orders = new Map<string, Line[]>();
  private readonly rng: Rng;

  constructor(
    readonly index: number,
    seed: number,
    private readonly ctx: ClientContext,
  ) {
    this.rng = mulberry32(seed);
  }

  private newMessage(consumer: Message['consumer'], data: Message['data']): Message {
    const rng = this.rng;
    const form = pick<Form>(rng, ['body', 'body', 'body', 'body', 'idempotency-key', 'both', 'cloudevent-structured', 'cloudevent-binary']);
    const id = `t${this.index}-${++this.seq}-${seededUuid(rng).slice(0, 8)}`;
    const message: Message = { client: this.index, id, key: keyOf(id, form), consumer, form, data, acks: [] };
    allMessages.push(message);
    stats.messages++;
    return message;
  }

  private line(orderId: string, bookId: string, quantity: number): Line {
    const key = lineKey(orderId, bookId);
    let line = allLines.get(key);
    if (line === undefined) {
      line = { orderId, bookId, quantity, state: 'none' };
      allLines.set(key, line);
      const lines = this.orders.get(orderId) ?? [];
      lines.push(line);
      this.orders.set(orderId, lines);
    }
    return line;
  }

  private quantity(): number {
    // Mostly small orders; now and then a big one, so that stock runs short.
    return this.rng() < 0.85 ? between(this.rng, 1, 4) : between(this.rng, 5, 40);
  }

  async run(): Promise<void> {
    const rng = this.rng;
    for (let step = 0; step < 100_000 && Date.now() < this.ctx.trafficEnd; step++) {
      const orders = [...this.orders.entries()];
      const lines = orders.flatMap(([, l]) => l);
      const r = rng();
      if (r < 0.42 || lines.length === 0) {
        // A new order, or another book on a recent one.
        const recent = orders.slice(-3);
        const orderId = recent.length > 0 && rng() < 0.15 ? pick(rng, recent)[0] : seededUuid(rng);
        const bookId = pick(rng, this.ctx.books);
        if (allLines.has(lineKey(orderId, bookId))) continue;
        await this.placeOrder(this.line(orderId, bookId, this.quantity()));
      } else if (r < 0.52) {
        // A producer duplicate: the same order line under a new message id.
        stats.producerDuplicates++;
        await this.placeOrder(pick(rng, lines));
      } else if (r < 0.56) {
        await this.racingDuplicates(this.line(seededUuid(rng), pick(rng, this.ctx.books), this.quantity()));
      } else if (r < 0.82) {
        const live = orders.filter(([, l]) => l.some((x) => x.state === 'reserved'));
        const [orderId, orderLines] = live.length > 0 && rng() < 0.8 ? pick(rng, live) : pick(rng, orders);
        const bookId = rng() < 0.4 ? pick(rng, orderLines).bookId : undefined;
        await this.cancel(orderId, bookId);
      } else if (r < 0.88) {
        // A cancellation sent again under a new id (a producer duplicate of a cancel).
        const released = lines.filter((l) => l.state === 'released');
        const target = released.length > 0 ? pick(rng, released) : pick(rng, lines);
        stats.producerDuplicates++;
        await this.cancel(target.orderId, rng() < 0.5 ? target.bookId : undefined);
      } else {
        // A late OrderPlaced for a line that was cancelled: must not reserve again.
        const released = lines.filter((l) => l.state === 'released');
        if (released.length === 0) continue;
        stats.producerDuplicates++;
        await this.placeOrder(pick(rng, released));
      }
    }
  }

  private async placeOrder(line: Line): Promise<void> {
    const message = this.newMessage(RESERVE, { orderId: line.orderId, bookId: line.bookId, quantity: line.quantity });
    if (await this.deliver(message)) applyReserve(message, line);
  }

  private async cancel(orderId: string, bookId: string | undefined): Promise<void> {
    const message = this.newMessage(RELEASE, bookId === undefined ? { orderId } : { orderId, bookId });
    if (await this.deliver(message)) applyRelease(message, this.orders.get(orderId) ?? []);
  }

  /** Two messages for one new order line at the same moment: at most one may reserve. */
  private async racingDuplicates(line: Line): Promise<void> {
    stats.racingDuplicates++;
    const data = { orderId: line.orderId, bookId: line.bookId, quantity: line.quantity };
    const a = this.newMessage(RESERVE, data);
    const b = this.newMessage(RESERVE, { ...data });
    const [okA, okB] = await Promise.all([this.deliver(a), this.deliver(b)]);
    if (!okA || !okB) return;
    const racing = [a, b].map((message) => ({ message, outcome: firstOutcome(message) }));
    const winners = racing.filter((r) => r.outcome.result === 'reserved').map((r) => r.message);
    if (winners.length > 1) {
      violation('double-reservation', `racing ${a.key} and ${b.key} both reserved ${line.orderId}/${line.bookId}`);
      return;
    }
    const winner = winners[0];
    for (const { message: m, outcome } of racing) {
      const existing = outcome.existing;
      const byWinner = winner !== undefined && existing?.reservedBy === winner.key && existing?.released === false;
      if (outcome.result === 'already-reserved' && !byWinner) {
        violation('wrong-outcome', `racing ${m.key}: ${canonicalize(outcome)} but the reserving message is ${winner?.key ?? 'none'}`);
      } else if (outcome.result !== 'reserved' && outcome.result !== 'already-reserved' && outcome.result !== 'insufficient-stock') {
        violation('wrong-outcome', `racing ${m.key}: ${canonicalize(outcome)}`);
      }
    }
    if (winner !== undefined) {
      line.state = 'reserved';
      line.reservedBy = winner.key;
    }
  }

  /**
   * At-least-once delivery: until a 2xx, to a random process, on any error, timeout or refused
   * connection. Sometimes the first delivery goes to two processes at once; sometimes the message is
   * delivered again after its acknowledgement.
   */
  private async deliver(message: Message): Promise<boolean> {
    const acked = await this.deliverUntilAck(message, this.rng() < 0.12);
    if (!acked) {
      stats.unacknowledged++;
      violation('unacknowledged', `${message.consumer} ${message.key} got no 2xx before the drain deadline`);
      return false;
    }
    if (this.rng() < 0.2 && Date.now() < this.ctx.trafficEnd) {
      const extra = between(this.rng, 1, 2);
      for (let i = 0; i < extra; i++) {
        stats.duplicates++;
        await this.deliverUntilAck(message, this.rng() < 0.3);
      }
    }
    return true;
  }

  private async deliverUntilAck(message: Message, simultaneous: boolean): Promise<boolean> {
    const { services, plan } = this.ctx;
    const { headers, body } = requestOf(message);
    let backoffMs = 50;
    for (let attempt = 1; attempt <= 1000; attempt++) {
      if (Date.now() > this.ctx.drainEnd()) return false;
      if (attempt > 1) stats.retries++;
      const first = pickTarget(this.rng, services);
      const targets = simultaneous && attempt === 1 && services.length > 1 ? [first, pickTarget(this.rng, services, first)] : [first];
      if (targets.length === 2) {
        stats.simultaneousPairs++;
        stats.duplicates++;
      }
      stats.deliveries += targets.length;
      const sentAt = Date.now();
      const results = await Promise.all(targets.map((t) => httpRequest(t, 'POST', routeOf(message), headers, body, plan.requestTimeoutMs)));
      let acked = false;
      let waitMs: number | undefined;
      for (const result of results) {
        if (!result.ok) continue;
        const { answer } = result;
        if (answer.status === 200 || answer.status === 201) {
          recordAck(message, answer);
          for (const observe of ackObservers) observe(sentAt, Date.now(), answer.status);
          acked = true;
        } else if (answer.status === 409 && problemType(answer.body) === '/problems/in-flight') {
          stats.inFlight409++;
          waitMs = Math.max(waitMs ?? 0, answer.retryAfterMs ?? 1000);
        } else if (answer.status < 500) {
          const answered = `${answer.status} ${JSON.stringify(answer.body).slice(0, 300)}`;
          violation('refused', `${message.consumer} ${message.key} (${message.form}): ${answered}`);
          return false;
        } else if (answer.retryAfterMs !== undefined) {
          waitMs = Math.max(waitMs ?? 0, Math.min(answer.retryAfterMs, 2000));
        }
      }
      if (acked) return true;
      if (waitMs !== undefined) {
        await sleep(waitMs * (0.5 + this.rng() * 0.5));
      } else {
        backoffMs = Math.min(backoffMs * 2, 1500);
        await sleep(backoffMs * (0.5 + this.rng()));
      }
    }
    return false;
  }
}

/** An operator restocking now and then with absolute values (PUT), never below what is reserved. */
export async function restocker(ctx: ClientContext, rng: Rng): Promise<void> {
  const headers = { 'content-type': 'application/json', authorization: `Bearer ${ADMIN_TOKEN}` };
  for (let round = 0; round < 10_000 && Date.now() < ctx.trafficEnd; round++) {
    await sleep(between(rng, 300, 1500));
    const bookId = pick(rng, ctx.books);
    const read = await httpRequest(pickTarget(rng, ctx.services), 'GET', `/stock/${bookId}`, {}, undefined, ctx.plan.requestTimeoutMs);
    if (!read.ok || read.answer.status !== 200) continue;
    const onHand = (read.answer.body as { reserved: number }).reserved + between(rng, 0, 25);
    for (let attempt = 0; attempt < 20 && Date.now() < ctx.trafficEnd; attempt++) {
      const put = await httpRequest(
        pickTarget(rng, ctx.services),
        'PUT',
        `/stock/${bookId}`,
        headers,
        JSON.stringify({ title: `Torture book ${ctx.books.indexOf(bookId)}`, onHand }),
        ctx.plan.requestTimeoutMs,
      );
      if (put.ok && put.answer.status === 200) {
        stats.restocks++;
        break;
      }
      if (put.ok && put.answer.status === 409 && problemType(put.answer.body) === '/problems/stock-below-reserved') {
        stats.restocksRefused++;
        break;
      }
      if (put.ok && put.answer.status < 500) {
        violation('refused', `PUT /stock/${bookId}: ${put.answer.status} ${JSON.stringify(put.answer.body).slice(0, 300)}`);
        break;
      }
      await sleep(200 + attempt * 100);
    }
  }
}
