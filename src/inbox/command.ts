import type { Static, TObject, TSchema } from 'typebox';
import { fingerprint } from './fingerprint.js';
import type { GroupCommitter, InboxHandler } from './group-commit.js';
import { OverloadedError } from './errors.js';
import type { MessageKey } from './message-key.js';
import type { InboxCommand, InboxContext, InboxResult } from './process-once.js';
import { processTwoPhase, type Attempt, type TwoPhaseOptions } from './two-phase.js';

/**
 * A command kind, declared once and run by every transport (HTTP, AMQP): the consumer whose inbox
 * records it, the schema of its data and of its outcome, and its work. The work is either a database
 * transaction (the claim, the work and the outcome commit together; group commit may run several
 * messages in one transaction) or a two-phase side effect outside the database (an email).
 */
interface CommandBase<S extends TObject, O extends TSchema> {
  /** The consumer: part of the inbox key, so each consumer processes a message once. */
  readonly consumer: string;
  /** Names the schemas in the OpenAPI document (`<name> envelope`, `<name> result`). */
  readonly name: string;
  readonly data: S;
  readonly outcome: O;
  /** Canonical form of validated data (e.g. lower-case uuids): what is fingerprinted and applied. */
  normalize(data: Static<S>): Static<S>;
}

/** Work inside the claim's transaction: `run` for one message, optionally `runBatch` for several. */
export interface TransactionalCommand<S extends TObject, O extends TSchema> extends CommandBase<S, O>, InboxHandler<Static<S>, Static<O>> {
  readonly kind: 'transaction';
}

/** A side effect that cannot join the transaction, recorded in two phases (see two-phase.ts). */
export interface TwoPhaseCommand<S extends TObject, O extends TSchema> extends CommandBase<S, O> {
  readonly kind: 'two-phase';
  /** The effect's receiver deduplicates by the downstream key, so an expired attempt may be repeated. */
  readonly resendIsSafe: boolean;
  /** Performs the effect; throws EffectNotPerformedError or EffectOutcomeUnknownError (see errors.ts). */
  perform(data: Static<S>, attempt: Attempt): Promise<Static<O>>;
}

export type CommandDefinition<S extends TObject = TObject, O extends TSchema = TSchema> =
  TransactionalCommand<S, O> | TwoPhaseCommand<S, O>;

export interface CommandRunnerOptions {
  /** How long a two-phase claim is presumed alive (another instance may be working on it). */
  leaseMs: number;
  /** Test seam: runs after a side effect succeeded, before its outcome is recorded. */
  afterSideEffect?: ((command: InboxCommand) => Promise<void>) | undefined;
  /** Told when an expired two-phase attempt was taken over and its effect performed again. */
  onTakeOver?: ((command: InboxCommand) => void) | undefined;
  /** Told when a two-phase attempt found its record no longer its own when settling it. */
  onStaleAttempt?: TwoPhaseOptions['onStaleAttempt'];
  /**
   * Two-phase commands a consumer may have in flight (INBOX_QUEUE_LIMIT, as for group commit's queue);
   * past it a command is refused as overloaded before anything is recorded or sent.
   */
  queueLimit: number;
  /** Seconds to advertise when refusing for overload. */
  overloadRetryAfterSeconds: number;
}

/**
 * The one way a command is executed, whatever carried it: normalize the validated data, fingerprint it,
 * then the inbox: group commit for transactional work, the two-phase record for a side effect. The
 * result is processed or duplicate; every refusal is an InboxError (errors.ts) or a database error.
 */
export class CommandRunner {
  readonly #ctx: InboxContext;
  readonly #committer: GroupCommitter;
  readonly #options: CommandRunnerOptions;
  /** Two-phase commands in flight per consumer. */
  readonly #twoPhaseInFlight = new Map<string, number>();

  constructor(ctx: InboxContext, committer: GroupCommitter, options: CommandRunnerOptions) {
    this.#ctx = ctx;
    this.#committer = committer;
    this.#options = options;
  }

  execute<S extends TObject, O extends TSchema>(
    def: CommandDefinition<S, O>,
    key: MessageKey,
    received: Static<S>,
  ): Promise<InboxResult<Static<O>>> {
    const data = def.normalize(received);
    const command: InboxCommand = { consumer: def.consumer, key, fingerprint: fingerprint(data), payload: data };
    // Not an async function: the hot path hands group commit's promise back as it is.
    return def.kind === 'transaction' ? this.#committer.submit(def, command, data) : this.#twoPhase(def, command, data);
  }

  async #twoPhase<S extends TObject, O extends TSchema>(
    def: TwoPhaseCommand<S, O>,
    command: InboxCommand,
    data: Static<S>,
  ): Promise<InboxResult<Static<O>>> {
    const { afterSideEffect, onTakeOver, onStaleAttempt, leaseMs, queueLimit, overloadRetryAfterSeconds } = this.#options;
    // The same bound as group commit's queue: a slow receiver must not pile up claims and connections without limit.
    const inFlight = this.#twoPhaseInFlight.get(def.consumer) ?? 0;
    if (inFlight >= queueLimit) throw new OverloadedError(def.consumer, command.key.messageId, overloadRetryAfterSeconds);
    this.#twoPhaseInFlight.set(def.consumer, inFlight + 1);
    try {
      const options = { leaseMs, resendIsSafe: def.resendIsSafe, onStaleAttempt };
      const result = await processTwoPhase(this.#ctx, command, options, async (attempt) => {
        const outcome = await def.perform(data, attempt);
        await afterSideEffect?.(command);
        return outcome;
      });
      if (result.takenOver) onTakeOver?.(command);
      return result;
    } finally {
      const left = (this.#twoPhaseInFlight.get(def.consumer) ?? 1) - 1;
      if (left === 0) this.#twoPhaseInFlight.delete(def.consumer);
      else this.#twoPhaseInFlight.set(def.consumer, left);
    }
  }

  /** Commands waiting for a group-commit transaction, across consumers (for metrics). */
  get queued(): number {
    return this.#committer.queued;
  }

  /** Copies waiting for a copy of their key that is in flight in this process. */
  get joined(): number {
    return this.#committer.joined;
  }
}
