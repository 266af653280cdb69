import { SpanKind, type Tracer } from '@opentelemetry/api';
import type { Static, TObject, TSchema } from 'typebox';
import type { Delivery, InboxContext, InboxResult } from './context.js';
import { OverloadedError } from './errors.js';
import { fingerprint } from './fingerprint.js';
import type { GroupCommitter } from './group-commit.js';
import type { CommandKind, TwoPhaseKind } from './kind.js';
import type { MessageKey } from './message-key.js';
import type { InboxStore } from './store.js';
import { activeTracer, endSpanWithError, INBOX_CONSUMER, INBOX_DECISION, INBOX_KEY, INBOX_KEY_SOURCE } from './tracing.js';
import { processTwoPhase, type TwoPhaseOptions } from './two-phase.js';

export interface CommandRunnerOptions {
  /** How long a two-phase claim is presumed alive (another instance may be working on it). */
  leaseMs: number;
  /** Told when an expired two-phase attempt was taken over and its effect performed again. */
  onTakeOver?: ((delivery: Delivery) => void) | undefined;
  /** Told when a two-phase attempt found its record no longer its own when settling it. */
  onStaleAttempt?: TwoPhaseOptions['onStaleAttempt'];
  /**
   * Two-phase deliveries a consumer may have in flight (as for group commit's queue); past it a delivery
   * is refused as overloaded before anything is recorded or sent.
   */
  queueLimit: number;
  /** Seconds to advertise when refusing for overload. */
  overloadRetryAfterSeconds: number;
}

/** What a transport needs of the inbox: run a command kind's message exactly once. */
export interface CommandExecutor {
  execute<S extends TObject, O extends TSchema>(
    command: CommandKind<S, O>,
    key: MessageKey,
    received: Static<S>,
  ): Promise<InboxResult<Static<O>>>;
  /** The store the inbox records in, when the executor has one: a transport records its dead letters there. */
  readonly store?: InboxStore;
}

/**
 * The one way a command is executed, whatever carried it: normalize the validated data, fingerprint it,
 * then the inbox: group commit for transactional work, the two-phase record for a side effect. The
 * result is processed or duplicate; every refusal is an InboxError (errors.ts) or a database error.
 */
export class CommandRunner implements CommandExecutor {
  readonly #ctx: InboxContext;
  readonly #committer: GroupCommitter;
  readonly #options: CommandRunnerOptions;
  /** Two-phase deliveries in flight per consumer. */
  readonly #twoPhaseInFlight = new Map<string, number>();

  constructor(ctx: InboxContext, committer: GroupCommitter, options: CommandRunnerOptions) {
    this.#ctx = ctx;
    this.#committer = committer;
    this.#options = options;
  }

  execute<S extends TObject, O extends TSchema>(
    command: CommandKind<S, O>,
    key: MessageKey,
    received: Static<S>,
  ): Promise<InboxResult<Static<O>>> {
    const data = command.normalize === undefined ? received : command.normalize(received);
    const delivery: Delivery = { consumer: command.consumer, key, fingerprint: fingerprint(data), payload: data };
    const tracer = activeTracer();
    if (tracer !== undefined) return this.#traced(tracer, command, delivery, data);
    // Not an async function: the hot path hands group commit's promise back as it is.
    return command.kind === 'transaction' ? this.#committer.submit(command, delivery) : this.#twoPhase(command, delivery, data);
  }

  /**
   * The same, in a span of the claim (a child of the transport's span) that says what the inbox decided;
   * the delivery carries the span's context, so the group-commit transaction links to it and the events
   * the work writes keep it.
   */
  #traced<S extends TObject, O extends TSchema>(
    tracer: Tracer,
    command: CommandKind<S, O>,
    delivery: Delivery,
    data: Static<S>,
  ): Promise<InboxResult<Static<O>>> {
    const attributes = { [INBOX_CONSUMER]: command.consumer, [INBOX_KEY]: delivery.key.messageId, [INBOX_KEY_SOURCE]: delivery.key.source };
    return tracer.startActiveSpan(`claim ${command.consumer}`, { kind: SpanKind.INTERNAL, attributes }, async (span) => {
      const traced: Delivery = { ...delivery, span: span.spanContext() };
      try {
        const result =
          command.kind === 'transaction'
            ? await this.#committer.submit<Static<O>>(command, traced)
            : await this.#twoPhase(command, traced, data);
        span.setAttribute(INBOX_DECISION, result.kind);
        span.end();
        return result;
      } catch (error) {
        endSpanWithError(span, error);
        throw error;
      }
    });
  }

  async #twoPhase<S extends TObject, O extends TSchema>(
    command: TwoPhaseKind<S, O>,
    delivery: Delivery,
    data: Static<S>,
  ): Promise<InboxResult<Static<O>>> {
    const { onTakeOver, onStaleAttempt, leaseMs, queueLimit, overloadRetryAfterSeconds } = this.#options;
    // The same bound as group commit's queue: a slow receiver must not pile up claims and connections without limit.
    const inFlight = this.#twoPhaseInFlight.get(command.consumer) ?? 0;
    if (inFlight >= queueLimit) throw new OverloadedError(command.consumer, delivery.key.messageId, overloadRetryAfterSeconds);
    this.#twoPhaseInFlight.set(command.consumer, inFlight + 1);
    try {
      const item = { data, key: delivery.key };
      const options: TwoPhaseOptions = {
        leaseMs,
        resendIsSafe: command.resendIsSafe,
        onStaleAttempt,
        record: command.record === undefined ? undefined : (trx, outcome, now) => command.record!(trx, item, outcome as Static<O>, now),
      };
      const result = await processTwoPhase(this.#ctx, delivery, options, (attempt) => command.perform(data, attempt));
      if (result.takenOver) onTakeOver?.(delivery);
      return result;
    } finally {
      const left = (this.#twoPhaseInFlight.get(command.consumer) ?? 1) - 1;
      if (left === 0) this.#twoPhaseInFlight.delete(command.consumer);
      else this.#twoPhaseInFlight.set(command.consumer, left);
    }
  }

  get store(): InboxStore {
    return this.#ctx.store;
  }

  /** Deliveries waiting for a group-commit transaction, across consumers (for metrics). */
  get queued(): number {
    return this.#committer.queued;
  }

  /** Copies waiting for a copy of their key that is in flight in this process. */
  get joined(): number {
    return this.#committer.joined;
  }
}
