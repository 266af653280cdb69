import type { Transaction } from 'kysely';
import type { DeferredWrites } from '../db/dialect.js';
import {
  type CommandExecutor,
  type CommandKind,
  type Completion,
  type InboxResult,
  InboxStore,
  type InboxTables,
  type MessageKey,
  type TwoPhaseKind,
} from '../inbox/machinery.js';
import type { ObservedExecutor } from '../adapters/fastify/index.js';

/** The message a seam is told about. */
export interface SeamMessage {
  readonly consumer: string;
  readonly messageId: string;
}

/** Seams for tests; never set in production. */
export interface TestHooks {
  /** Runs inside a command's transaction, after its work and completion were written, just before commit: delay it or throw. */
  beforeCommit?: (message: SeamMessage) => Promise<void>;
  /** Runs after an external side effect succeeded, before its outcome is recorded: throw to crash there. */
  afterSideEffect?: (message: SeamMessage) => Promise<void>;
}

/**
 * The inbox store with `beforeCommit` between a claim transaction's last write and its commit: the
 * completion is the last thing written, so the seam flushes the deferred writes and then runs, once per
 * message in the order completed.
 */
class StoreWithBeforeCommit extends InboxStore {
  readonly #hook: NonNullable<TestHooks['beforeCommit']>;

  constructor(db: ConstructorParameters<typeof InboxStore>[0], hook: NonNullable<TestHooks['beforeCommit']>) {
    super(db);
    this.#hook = hook;
  }

  override async complete(
    writes: DeferredWrites,
    trx: Transaction<InboxTables>,
    consumer: string,
    completions: readonly Completion[],
    completedAt: Date,
  ): Promise<void> {
    await super.complete(writes, trx, consumer, completions, completedAt);
    await writes.flush();
    for (const { messageId } of completions) await this.#hook({ consumer, messageId });
  }
}

/** The store the service uses: the plain one, or one with the beforeCommit seam. */
export function storeWithSeams(db: ConstructorParameters<typeof InboxStore>[0], hooks: TestHooks): InboxStore {
  return hooks.beforeCommit === undefined ? new InboxStore(db) : new StoreWithBeforeCommit(db, hooks.beforeCommit);
}

/** The command executor with `afterSideEffect` between a side effect's success and the recording of its outcome. */
export function executorWithSeams(executor: ObservedExecutor, hooks: TestHooks): ObservedExecutor {
  const hook = hooks.afterSideEffect;
  if (hook === undefined) return executor;
  const seamed = (kind: TwoPhaseKind, key: MessageKey): TwoPhaseKind => ({
    ...kind,
    perform: async (data, attempt) => {
      const outcome = await kind.perform(data, attempt);
      await hook({ consumer: kind.consumer, messageId: key.messageId });
      return outcome;
    },
  });
  return {
    execute: ((kind: CommandKind, key: MessageKey, received: unknown): Promise<InboxResult<unknown>> =>
      executor.execute(kind.kind === 'two-phase' ? seamed(kind, key) : kind, key, received as never)) as CommandExecutor['execute'],
    get queued() {
      return executor.queued;
    },
    get joined() {
      return executor.joined;
    },
  };
}
