import { COMMAND_KINDS, QUEUED_KINDS, RELEASE_STOCK, RESERVE_STOCK, STOCK_RESERVED_EMAIL, type ConsumerName } from './command-kinds.js';
import type { Config } from './config.js';
import type { CommandKind } from './inbox/machinery.js';
import { orderCancelledCommand, orderPlacedCommand } from './inventory/order.commands.js';
import { emailProviderFor } from './notifications/email-provider.js';
import { stockReservedEmailCommand } from './notifications/stock-reserved-email.command.js';

/**
 * The work of each command kind in src/command-kinds.ts. A function of the configuration, so a kind
 * whose work needs a setting (the email's provider) builds it only where it is used.
 */
const WORK: { readonly [C in ConsumerName]: (config: Config) => CommandKind } = {
  [RESERVE_STOCK]: () => orderPlacedCommand,
  [RELEASE_STOCK]: () => orderCancelledCommand,
  [STOCK_RESERVED_EMAIL]: (config) => stockReservedEmailCommand(emailProviderFor(config)),
};

/** The command `consumer` runs. */
export function commandOf(consumer: ConsumerName, config: Config): CommandKind {
  return WORK[consumer](config);
}

/** Every command, in the list's order. */
export function allCommands(config: Config): CommandKind[] {
  return COMMAND_KINDS.map((k) => commandOf(k.consumer, config));
}

/** The commands an AMQP queue feeds, each with its queue's configured name. */
export function queuedCommands(config: Config): { queue: string; command: CommandKind }[] {
  return QUEUED_KINDS.map((k) => ({ queue: config[k.queue.setting], command: commandOf(k.consumer, config) }));
}
