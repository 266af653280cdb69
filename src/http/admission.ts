import type { FastifyReply, HookHandlerDoneFunction, onRequestHookHandler } from 'fastify';
import { ProblemError } from './problem.js';

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
}

export interface CommandAdmission {
  /** The command routes' first onRequest hook. */
  readonly hook: onRequestHookHandler;
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
  return {
    hook: (_request, reply, done) => queue.arrive(reply, done),
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
