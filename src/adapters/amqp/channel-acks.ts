import type { Channel, ConsumeMessage } from 'amqplib';

/**
 * The settlements of one channel's deliveries, with its acks sent in as few frames as delivery order
 * allows. An ack waits until the end of the event loop's turn; then the acked deliveries whose earlier
 * deliveries are all settled go as one `multiple` ack of the latest of them (a batch's deliveries,
 * committed together, cost one frame), and each acked delivery behind one still in flight goes alone,
 * so a delivery waiting out a retry delay holds back no other's ack (nor the prefetch window).
 * Rejects and nacks go at once, each alone. Delivery tags rise in delivery order on a channel, and a
 * Map keeps insertion order: its first entries are the oldest unsettled deliveries.
 */
export class ChannelAcks {
  readonly #channel: Channel;
  /** Unsettled deliveries by tag, `acked` once acked here (the frame not yet sent), otherwise in flight. */
  readonly #unsettled = new Map<number, { readonly message: ConsumeMessage; acked: boolean }>();
  #scheduled = false;

  constructor(channel: Channel) {
    this.#channel = channel;
  }

  /** A delivery has arrived: it is in flight until settled. */
  received(message: ConsumeMessage): void {
    this.#unsettled.set(message.fields.deliveryTag, { message, acked: false });
  }

  /** Acks a delivery, at the end of this turn of the event loop. */
  ack(message: ConsumeMessage): void {
    const delivery = this.#unsettled.get(message.fields.deliveryTag);
    if (delivery === undefined) return;
    delivery.acked = true;
    if (this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(() => this.flush());
  }

  /** Settles a delivery otherwise than by ack (a reject, a nack), at once. */
  settle(message: ConsumeMessage, send: (channel: Channel) => void): void {
    this.#unsettled.delete(message.fields.deliveryTag);
    moot(() => send(this.#channel));
  }

  /** Sends the acks waiting: one frame for those with nothing unsettled before them, one each for the rest. */
  flush(): void {
    this.#scheduled = false;
    let latest: ConsumeMessage | undefined;
    for (const [tag, { message, acked }] of this.#unsettled) {
      if (!acked) break;
      latest = message;
      this.#unsettled.delete(tag);
    }
    if (latest !== undefined) {
      const upTo = latest;
      moot(() => this.#channel.ack(upTo, true));
    }
    for (const [tag, { message, acked }] of this.#unsettled) {
      if (!acked) continue;
      this.#unsettled.delete(tag);
      moot(() => this.#channel.ack(message));
    }
  }
}

/** Acks, nacks and rejects on a channel that has closed meanwhile are moot: the broker requeued the message. */
function moot(action: () => void): void {
  try {
    action();
  } catch {
    // IllegalOperationError: the channel is closed; nothing to settle on it any more.
  }
}
