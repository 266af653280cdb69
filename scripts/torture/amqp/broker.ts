/** The AMQP mode's own broker clients: connections that reopen across a broker restart, and the tap that collects every event. */
import { setTimeout as sleep } from 'node:timers/promises';
import { connect, type ChannelModel, type ConfirmChannel } from 'amqplib';
import { amqpStats } from '../report.js';

const EXCHANGE = 'inventory.events';
const TAP_QUEUE = 'torture.events-tap';

/** A connection for the run's own clients, opened again whenever it drops. */
export class ClientConnection {
  model: ChannelModel | undefined;
  channel: ConfirmChannel | undefined;

  constructor(
    private readonly url: string,
    private readonly setup: (channel: ConfirmChannel) => Promise<void>,
  ) {}

  async ensure(deadline: number): Promise<ConfirmChannel> {
    while (Date.now() < deadline) {
      if (this.channel !== undefined) return this.channel;
      try {
        const model = await connect(this.url);
        model.on('error', () => {});
        const channel = await model.createConfirmChannel();
        channel.on('error', () => {});
        const drop = () => {
          if (this.model === model) {
            this.model = undefined;
            this.channel = undefined;
          }
        };
        model.on('close', drop);
        channel.on('close', drop);
        await this.setup(channel);
        this.model = model;
        this.channel = channel;
        return channel;
      } catch {
        amqpStats.failedConnects++;
        await sleep(250);
      }
    }
    throw new Error('could not reach the broker before the deadline');
  }

  async close(): Promise<void> {
    await this.model?.close().catch(() => {});
  }
}

/** An event as the tap first received it, and how many times it came. */
export interface ReceivedEvent {
  type: string;
  bodyId: string;
  causation: string;
  count: number;
}

/** Every event the services publish, by message id, through a durable queue bound to the events exchange. */
export class EventTap {
  readonly received = new Map<string, ReceivedEvent>();
  private readonly connection: ClientConnection;
  private stopped = false;
  private readonly reconnecting: Promise<void>;

  /**
   * Connects at once, and again in the background whenever the connection drops, until stop(). The tap's
   * queue takes `queueArguments` (a quorum queue, so that it survives a cluster node's loss).
   */
  constructor(
    url: string,
    private readonly queueArguments: Record<string, unknown> = {},
  ) {
    this.connection = new ClientConnection(url, (channel) => this.consume(channel));
    this.reconnecting = this.keepConnected();
  }

  private async keepConnected(): Promise<void> {
    while (!this.stopped) {
      await this.connection.ensure(Date.now() + 60_000).catch(() => undefined);
      await sleep(200);
    }
  }

  /** Waits until the tap is connected and bound. */
  async ready(deadline: number): Promise<void> {
    await this.connection.ensure(deadline);
  }

  private async consume(channel: ConfirmChannel): Promise<void> {
    // Durable and bound before any event is published: events published while this client is away wait here.
    await channel.assertExchange(EXCHANGE, 'topic', { durable: true });
    await channel.assertQueue(TAP_QUEUE, { durable: true, arguments: this.queueArguments });
    await channel.bindQueue(TAP_QUEUE, EXCHANGE, '#');
    await channel.prefetch(200);
    await channel.consume(TAP_QUEUE, (message) => {
      if (message === null) return;
      const id = String(message.properties.messageId);
      const body = JSON.parse(message.content.toString()) as { id: string; type: string; causationid: string };
      const seen = this.received.get(id);
      if (seen === undefined) {
        this.received.set(id, { type: message.fields.routingKey, bodyId: body.id, causation: body.causationid, count: 1 });
      } else {
        seen.count++;
        amqpStats.eventRedeliveries++;
      }
      amqpStats.eventsReceived++;
      try {
        channel.ack(message);
      } catch {
        // the channel closed: the message comes again, and is counted as a repeat
      }
    });
  }

  /** How many distinct events of the type were received. */
  distinct(type: string): number {
    return [...this.received.values()].filter((e) => e.type === type).length;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.connection.close();
    await this.reconnecting;
  }
}
