import { randomBytes } from 'node:crypto';
import { inspect } from 'node:util';
import { connect, type Channel, type ChannelModel, type GetMessage } from 'amqplib';
import type { Config } from '../../src/config.js';

/**
 * The RabbitMQ the messaging tests run against: TEST_AMQP_URL (required when REQUIRE_AMQP=1, as in
 * .ci/run). Each test gets exchanges and queues of its own names, so tests never see each other's
 * messages on a shared broker, and deletes them afterwards.
 */
export const amqpUrl = process.env.TEST_AMQP_URL;

if (process.env.REQUIRE_AMQP === '1' && !amqpUrl) {
  throw new Error('REQUIRE_AMQP=1 but TEST_AMQP_URL is not set: the RabbitMQ tests would be skipped');
}

export const skipWithoutAmqp = amqpUrl === undefined ? 'TEST_AMQP_URL is not set (e.g. amqp://guest:guest@127.0.0.1:5672)' : false;

export type AmqpConfig = Pick<
  Config,
  'amqpUrl' | 'amqpExchange' | 'amqpDeadLetterExchange' | 'amqpDeadLetterQueue' | 'amqpOrderPlacedQueue' | 'amqpOrderCancelledQueue'
>;

/** Exchange and queue names no other test uses, for the service's configuration. */
export function uniqueTopology(url = amqpUrl!): AmqpConfig {
  const prefix = `test.${Date.now().toString(36)}.${randomBytes(4).toString('hex')}`;
  return {
    amqpUrl: url,
    amqpExchange: `${prefix}.events`,
    amqpDeadLetterExchange: `${prefix}.dead-letter`,
    amqpDeadLetterQueue: `${prefix}.dead-letter`,
    amqpOrderPlacedQueue: `${prefix}.order-placed`,
    amqpOrderCancelledQueue: `${prefix}.order-cancelled`,
  };
}

/** A test's own client connection: publishes commands and reads what the service publishes. */
export class TestBroker {
  private constructor(
    readonly model: ChannelModel,
    readonly channel: Channel,
    readonly topology: AmqpConfig,
    private readonly queues: string[],
    private readonly exchanges: string[],
  ) {}

  static async open(topology: AmqpConfig): Promise<TestBroker> {
    const model = await connect(topology.amqpUrl!);
    const channel = await model.createChannel();
    // Declared here too, so a test can publish and bind before the service connected.
    await channel.assertExchange(topology.amqpExchange, 'topic', { durable: true });
    await channel.assertExchange(topology.amqpDeadLetterExchange, 'topic', { durable: true });
    for (const queue of [topology.amqpOrderPlacedQueue, topology.amqpOrderCancelledQueue]) {
      await channel.assertQueue(queue, { durable: true, arguments: { 'x-dead-letter-exchange': topology.amqpDeadLetterExchange } });
    }
    await channel.assertQueue(topology.amqpDeadLetterQueue, { durable: true });
    return new TestBroker(
      model,
      channel,
      topology,
      [topology.amqpOrderPlacedQueue, topology.amqpOrderCancelledQueue, topology.amqpDeadLetterQueue],
      [topology.amqpExchange, topology.amqpDeadLetterExchange],
    );
  }

  /** A queue of the test's own bound to an exchange: what a downstream consumer would see. */
  async bindQueue(exchange: string, pattern = '#'): Promise<string> {
    const { queue } = await this.channel.assertQueue(`${exchange}.tap.${randomBytes(3).toString('hex')}`, {
      durable: false,
      exclusive: true,
    });
    await this.channel.bindQueue(queue, exchange, pattern);
    this.queues.push(queue);
    return queue;
  }

  /** Publishes a command message to a queue (default exchange), persistent. */
  send(queue: string, body: unknown, properties: { messageId?: string } = {}): void {
    const content = Buffer.isBuffer(body) ? body : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
    this.channel.sendToQueue(queue, content, { persistent: true, contentType: 'application/json', ...properties });
  }

  /** Every message now in a queue, taken off it (acked). */
  async drain(queue: string): Promise<GetMessage[]> {
    const out: GetMessage[] = [];
    for (let i = 0; i < 100_000; i++) {
      const message = await this.channel.get(queue, { noAck: true });
      if (message === false) return out;
      out.push(message);
    }
    return out;
  }

  /** Ready (not unacknowledged) messages in a queue. */
  async depth(queue: string): Promise<number> {
    return (await this.channel.checkQueue(queue)).messageCount;
  }

  async close(): Promise<void> {
    for (const queue of this.queues) await this.channel.deleteQueue(queue).catch(() => {});
    for (const exchange of this.exchanges) await this.channel.deleteExchange(exchange).catch(() => {});
    await this.model.close().catch(() => {});
  }
}

/** Polls `check` until it returns a value other than undefined, or fails after timeoutMs. */
export async function eventually<T>(what: string, check: () => Promise<T | undefined>, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const value = await check();
      if (value !== undefined) return value;
    } catch (error) {
      last = error;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(
    `timed out after ${timeoutMs} ms waiting for ${what}${last === undefined ? '' : `: ${last instanceof Error ? String(last) : inspect(last)}`}`,
  );
}

/** The JSON body of a published event (a CloudEvent): the fields the tests read. */
export interface EventBody {
  id: string;
  type: string;
  causationid: string;
  data: { orderId: string; bookId?: string; quantity?: number };
}

export function eventBody(message: { content: Buffer }): EventBody {
  return JSON.parse(message.content.toString()) as EventBody;
}
