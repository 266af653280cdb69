import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction, onRequestHookHandler } from 'fastify';
import { answerAndClose } from './client-error.js';
import { problem, ProblemError } from './problem.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** The bound on commands in flight: the command routes' first onRequest hook, and its counts. */
    commandAdmission: CommandAdmission;
  }
}

export interface AdmissionOptions {
  /** Commands one replica holds at once, from admission to the response sent (HTTP_MAX_COMMANDS_IN_FLIGHT). */
  limit: number;
  /** How long a command past the bound may wait for a free place before it is refused; 0 refuses at once. */
  waitMs: number;
  /** Commands that may wait at once; past it the one that has waited longest is refused. */
  maxWaiting: number;
  /** Signed deliveries read at once before their signature can be checked (HTTP_MAX_UNVERIFIED_COMMANDS). */
  unverifiedLimit?: number;
  /** How long such a delivery's body may take to arrive (HTTP_UNVERIFIED_BODY_TIMEOUT_MS); past it 408, connection closed. */
  unverifiedBodyTimeoutMs?: number;
}

export interface CommandAdmission {
  /** The command routes' first onRequest hook (anonymous commands: nobody's credential to check first). */
  readonly hook: onRequestHookHandler;
  /**
   * The onRequest hook after a producer's credential was checked from the headers: a producer's command
   * takes a place of the bound; a signed delivery, whose signature needs its body, takes a place of its
   * own smaller bound instead, and must send its body within the unverified body timeout.
   */
  readonly afterHeaders: onRequestHookHandler;
  /** The preValidation hook once a signed delivery's signature was verified: now it takes a place of the bound. */
  readonly onceVerified: (request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction) => void;
  /** Signed deliveries being read, not yet verified. */
  readonly unverified: number;
  /** Commands admitted whose response has not gone out yet. */
  readonly inFlight: number;
  /** Commands waiting, unread, for a place. */
  readonly waiting: number;
}

interface Waiter {
  done: HookHandlerDoneFunction;
  /** performance.now() past which it is refused. */
  deadline: number;
  state: 'waiting' | 'admitted' | 'refused' | 'gone';
}

/**
 * A bound on the commands one replica holds over HTTP at once, checked as a request arrives, before its
 * body is read, parsed, validated or fingerprinted. A command counts until its response has been sent or
 * its connection closed.
 *
 * Past the bound a command waits, still unread, for a place to come free, at most `waitMs`; then it is
 * answered 503 `overloaded` with Retry-After, nothing recorded. Waiting costs a timer and the memory
 * of a parsed request, no CPU: the answers that would be refusals become fewer and later, and a client
 * that ignores Retry-After and sends again at once comes back at the rate of the waits, not at the rate
 * the event loop can write 503s (which, under a flood of connections, is what starves the admitted
 * commands and the database replies they wait for). A place that comes free goes to the command that
 * arrived last (LIFO): under a sustained overload the queue is always full and the oldest waiters are
 * the ones past saving, so the newest is admitted with the shortest wait and the latency of what is
 * admitted stays bounded by the in-flight bound, not by the queue. Past `maxWaiting` waiters, the
 * oldest is refused to make room.
 *
 * Under the inbox queue's own bound (INBOX_QUEUE_LIMIT) a refusal comes too late to help: by then the
 * body has been read, parsed and fingerprinted, as for an admitted command.
 */
export function commandAdmission(options: AdmissionOptions): CommandAdmission {
  const queue = new AdmissionQueue(options);
  const unverified = new UnverifiedDeliveries(options.unverifiedLimit ?? 64, options.unverifiedBodyTimeoutMs ?? 2000);
  return {
    hook: (_request, reply, done) => queue.arrive(reply, done),
    afterHeaders: (request, reply, done) => {
      if (request.producer !== undefined) queue.arrive(reply, done);
      else unverified.arrive(request, reply, done);
    },
    onceVerified: (request, reply, done) => {
      if (unverified.verified(request)) queue.arrive(reply, done);
      else done();
    },
    get unverified() {
      return unverified.count;
    },
    get inFlight() {
      return queue.inFlight;
    },
    get waiting() {
      return queue.waitingCount();
    },
  };
}

/** The finest grain of the waits' ends. */
const EXPIRY_TICK_MS = 10;

class AdmissionQueue {
  inFlight = 0;
  /** Oldest first from `head`: admitted from the end, refused from the start. */
  readonly #waiting: Waiter[] = [];
  #head = 0;
  #timer: NodeJS.Timeout | undefined;
  readonly #options: AdmissionOptions;
  readonly #detail: string;
  readonly #release = () => this.#released();

  constructor(options: AdmissionOptions) {
    this.#options = options;
    this.#detail = `${options.limit} commands are in progress on this replica (HTTP_MAX_COMMANDS_IN_FLIGHT); retry shortly`;
  }

  arrive(reply: FastifyReply, done: HookHandlerDoneFunction): void {
    const { limit, waitMs, maxWaiting } = this.#options;
    if (this.inFlight < limit) {
      this.inFlight++;
      reply.raw.once('close', this.#release);
      done();
      return;
    }
    if (waitMs === 0 || maxWaiting === 0) {
      this.#refuse(done);
      return;
    }
    if (this.#waiting.length - this.#head >= maxWaiting) this.#refuseIfWaiting(this.#shift());
    const now = performance.now();
    const waiter: Waiter = { done, deadline: now + waitMs, state: 'waiting' };
    this.#waiting.push(waiter);
    // One listener for the request's whole life: a connection closed while waiting just leaves the queue.
    reply.raw.once('close', () => {
      if (waiter.state === 'admitted') this.#released();
      else if (waiter.state === 'waiting') waiter.state = 'gone';
    });
    this.#arm(now);
  }

  waitingCount(): number {
    let n = 0;
    for (let i = this.#head; i < this.#waiting.length; i++) if (this.#waiting[i]!.state === 'waiting') n++;
    return n;
  }

  /** A response went out (or its connection closed): the place goes to the newest waiter. */
  #released(): void {
    this.inFlight--;
    while (this.inFlight < this.#options.limit && this.#waiting.length > this.#head) {
      const next = this.#waiting.pop()!;
      if (next.state !== 'waiting') continue;
      this.inFlight++;
      next.state = 'admitted';
      next.done();
    }
    if (this.#waiting.length === this.#head) this.#waiting.length = this.#head = 0;
  }

  /** Takes the oldest waiter off the queue. */
  #shift(): Waiter {
    const oldest = this.#waiting[this.#head]!;
    this.#waiting[this.#head++] = undefined as never;
    if (this.#head === this.#waiting.length) this.#waiting.length = this.#head = 0;
    else if (this.#head >= 1024 && this.#head * 2 >= this.#waiting.length) {
      this.#waiting.splice(0, this.#head);
      this.#head = 0;
    }
    return oldest;
  }

  /** Refuses every waiter whose wait is over, and arms the timer for the next one. */
  #expire(): void {
    this.#timer = undefined;
    const now = performance.now();
    while (this.#waiting.length > this.#head) {
      const oldest = this.#waiting[this.#head]!;
      if (oldest.state === 'waiting' && oldest.deadline > now) break;
      this.#refuseIfWaiting(this.#shift());
    }
    this.#arm(now);
  }

  #arm(now: number): void {
    if (this.#timer !== undefined || this.#waiting.length === this.#head) return;
    // At least EXPIRY_TICK_MS apart: the waits that end close together are refused in one pass.
    this.#timer = setTimeout(() => this.#expire(), Math.max(EXPIRY_TICK_MS, this.#waiting[this.#head]!.deadline - now));
    this.#timer.unref();
  }

  #refuseIfWaiting(waiter: Waiter): void {
    if (waiter.state !== 'waiting') return;
    waiter.state = 'refused';
    this.#refuse(waiter.done);
  }

  #refuse(done: HookHandlerDoneFunction): void {
    done(new ProblemError('overloaded', { detail: this.#detail, retryAfterSeconds: 1 }, { 'retry-after': '1' }));
  }
}

/**
 * Signed deliveries between their headers and their verified signature: nobody is known to have sent
 * them yet, so they never hold a place of the commands' bound. They have a bound of their own (past it:
 * 503 overloaded at once, no wait), and their body must arrive within a short timeout (past it: 408
 * request-timeout, connection closed), so slow or never-finished bodies hold neither a place of the
 * bound nor a connection for long. Once verified, a delivery leaves this bound and queues for the
 * commands' bound like any producer's command.
 */
class UnverifiedDeliveries {
  count = 0;
  readonly #limit: number;
  readonly #bodyTimeoutMs: number;
  /** The deliveries being read, and how each one's place is given back. */
  readonly #reading = new WeakMap<FastifyRequest, () => void>();
  readonly #detail: string;

  constructor(limit: number, bodyTimeoutMs: number) {
    this.#limit = limit;
    this.#bodyTimeoutMs = bodyTimeoutMs;
    this.#detail = `${limit} signed deliveries are being read on this replica before their signature can be checked (HTTP_MAX_UNVERIFIED_COMMANDS); retry shortly`;
  }

  arrive(request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction): void {
    if (this.count >= this.#limit) {
      done(new ProblemError('overloaded', { detail: this.#detail, retryAfterSeconds: 1 }, { 'retry-after': '1' }));
      return;
    }
    this.count++;
    let held = true;
    const timer = setTimeout(() => {
      release();
      answerAndClose(
        request.raw.socket,
        problem('request-timeout', {
          detail: `the body of a signed delivery must arrive within ${this.#bodyTimeoutMs} ms (HTTP_UNVERIFIED_BODY_TIMEOUT_MS)`,
        }),
      );
    }, this.#bodyTimeoutMs);
    timer.unref();
    const release = () => {
      if (!held) return;
      held = false;
      clearTimeout(timer);
      this.count--;
      this.#reading.delete(request);
    };
    this.#reading.set(request, release);
    reply.raw.once('close', release);
    done();
  }

  /** True when the request was a delivery being read: its place here is given back. */
  verified(request: FastifyRequest): boolean {
    const release = this.#reading.get(request);
    if (release === undefined) return false;
    release();
    return true;
  }
}
