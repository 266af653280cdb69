import type { CommandExecutor, CommandKind, InboxResult, MessageKey, TwoPhaseKind } from '../inbox/machinery.js';
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

/** The command executor with `afterSideEffect` between a side effect's success and the recording of its outcome. */
export function executorWithSeams(executor: ObservedExecutor, hooks: TestHooks): ObservedExecutor {
  const hook = hooks.afterSideEffect;
  if (hook === undefined) return executor;
  const seamed = (command: TwoPhaseKind, key: MessageKey): TwoPhaseKind => ({
    ...command,
    perform: async (data, attempt) => {
      const outcome = await command.perform(data, attempt);
      await hook({ consumer: command.consumer, messageId: key.messageId });
      return outcome;
    },
  });
  return {
    execute: ((command: CommandKind, key: MessageKey, received: unknown): Promise<InboxResult<unknown>> =>
      executor.execute(
        command.kind === 'two-phase' ? seamed(command, key) : command,
        key,
        received as never,
      )) as CommandExecutor['execute'],
    get queued() {
      return executor.queued;
    },
    get joined() {
      return executor.joined;
    },
  };
}
