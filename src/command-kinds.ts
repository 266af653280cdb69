/**
 * The service's command kinds, each named once: its consumer (the key space its messages are recorded
 * in), its HTTP route, and the AMQP queue that feeds it, if one does. The routes, the AMQP consumer, the
 * dead-letter replay, the configuration and the console all read this list. It imports nothing: the
 * console's browser bundle includes it.
 */

/** The setting and the environment variable naming the queue a command kind is fed by. */
export interface CommandQueue {
  readonly setting: 'amqpOrderPlacedQueue' | 'amqpOrderCancelledQueue';
  readonly env: string;
  readonly fallback: string;
}

export interface CommandKindEntry {
  readonly consumer: string;
  /** The message type, as the command's OpenAPI examples and logs name it. */
  readonly name: string;
  /** The URL of its HTTP route. */
  readonly url: string;
  /** Its AMQP queue; absent: HTTP only. */
  readonly queue?: CommandQueue;
}

export const RESERVE_STOCK = 'inventory.reserve-stock';
export const RELEASE_STOCK = 'inventory.release-stock';
export const STOCK_RESERVED_EMAIL = 'notifications.stock-reserved-email';

export const COMMAND_KINDS = [
  {
    consumer: RESERVE_STOCK,
    name: 'OrderPlaced',
    url: '/inventory/order-placed',
    queue: { setting: 'amqpOrderPlacedQueue', env: 'AMQP_ORDER_PLACED_QUEUE', fallback: 'inventory.order-placed' },
  },
  {
    consumer: RELEASE_STOCK,
    name: 'OrderCancelled',
    url: '/inventory/order-cancelled',
    queue: { setting: 'amqpOrderCancelledQueue', env: 'AMQP_ORDER_CANCELLED_QUEUE', fallback: 'inventory.order-cancelled' },
  },
  { consumer: STOCK_RESERVED_EMAIL, name: 'StockReservedEmail', url: '/notifications/stock-reserved-email' },
] as const satisfies readonly CommandKindEntry[];

export type ConsumerName = (typeof COMMAND_KINDS)[number]['consumer'];

/** Every consumer, in the list's order. */
export const CONSUMERS: readonly string[] = COMMAND_KINDS.map((k) => k.consumer);

/** The kinds an AMQP queue feeds, with their queue. */
export const QUEUED_KINDS = COMMAND_KINDS.filter(
  (k): k is Extract<(typeof COMMAND_KINDS)[number], { queue: CommandQueue }> => 'queue' in k,
);

/** The kind of `consumer`; an error for a consumer the list does not name. */
export function commandKind(consumer: string): (typeof COMMAND_KINDS)[number] {
  const kind = COMMAND_KINDS.find((k) => k.consumer === consumer);
  if (kind === undefined) throw new Error(`${consumer} is not in the list of command kinds (src/command-kinds.ts)`);
  return kind;
}
