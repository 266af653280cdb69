import assert from 'node:assert/strict';
import { setImmediate as turn } from 'node:timers/promises';
import { describe, test } from 'node:test';
import type { Channel, ConsumeMessage } from 'amqplib';
import { ChannelAcks } from '../../src/adapters/amqp/channel-acks.js';

/** The frames a channel was asked to send, as (what, tag, multiple). */
function recordingChannel() {
  const frames: string[] = [];
  const channel = {
    ack: (m: ConsumeMessage, multiple = false) => frames.push(`ack ${m.fields.deliveryTag}${multiple ? ' multiple' : ''}`),
    reject: (m: ConsumeMessage) => frames.push(`reject ${m.fields.deliveryTag}`),
    nack: (m: ConsumeMessage) => frames.push(`nack ${m.fields.deliveryTag}`),
  } as unknown as Channel;
  return { channel, frames };
}

function delivery(tag: number): ConsumeMessage {
  return { fields: { deliveryTag: tag }, properties: {}, content: Buffer.alloc(0) } as unknown as ConsumeMessage;
}

/** A channel's acks with deliveries 1..n received on it. */
function receiving(n: number) {
  const { channel, frames } = recordingChannel();
  const acks = new ChannelAcks(channel);
  const deliveries = Array.from({ length: n }, (_, i) => delivery(i + 1));
  for (const d of deliveries) acks.received(d);
  return { acks, frames, deliveries: deliveries as [ConsumeMessage, ...ConsumeMessage[]] };
}

describe('acks of one channel', () => {
  test("a batch's deliveries, acked in one turn, cost one frame: a multiple ack of the latest", async () => {
    const { acks, frames, deliveries } = receiving(3);
    const [d1, d2, d3] = deliveries;
    acks.ack(d2!);
    acks.ack(d1);
    acks.ack(d3!);
    assert.deepEqual(frames, [], 'nothing before the end of the turn');
    await turn();
    assert.deepEqual(frames, ['ack 3 multiple']);
  });

  test('a delivery still in flight holds back no ack: those after it go one by one; its own, later, covers only itself', async () => {
    const { acks, frames, deliveries } = receiving(4);
    const [d1, d2, d3, d4] = deliveries;
    acks.ack(d2!);
    acks.ack(d3!);
    await turn();
    assert.deepEqual(frames, ['ack 2', 'ack 3'], 'delivery 1 is in flight: a multiple ack of 3 would ack it too');
    acks.ack(d1);
    await turn();
    assert.deepEqual(frames.slice(2), ['ack 1 multiple'], 'delivery 4 is still in flight, and not covered');
    acks.ack(d4!);
    await turn();
    assert.deepEqual(frames.slice(3), ['ack 4 multiple']);
  });

  test('rejects and nacks go at once, each alone; the acks around them still batch', async () => {
    const { acks, frames, deliveries } = receiving(4);
    const [d1, d2, d3, d4] = deliveries;
    acks.ack(d1);
    acks.settle(d2!, (c) => c.reject(d2!, false));
    acks.settle(d3!, (c) => c.nack(d3!, false, true));
    acks.ack(d4!);
    assert.deepEqual(frames, ['reject 2', 'nack 3']);
    await turn();
    assert.deepEqual(frames, ['reject 2', 'nack 3', 'ack 4 multiple']);
  });

  test('flush sends what waits at once (before the channel closes); an ack on a closed channel is moot', async () => {
    const { acks, frames, deliveries } = receiving(1);
    const [d1] = deliveries;
    acks.ack(d1);
    acks.flush();
    assert.deepEqual(frames, ['ack 1 multiple']);
    await turn();
    assert.deepEqual(frames, ['ack 1 multiple'], 'the scheduled flush finds nothing more to send');

    const closed = new ChannelAcks({
      ack: () => {
        throw new Error('Channel closed');
      },
    } as unknown as Channel);
    const d2 = delivery(2);
    closed.received(d2);
    closed.ack(d2);
    assert.doesNotThrow(() => closed.flush());
  });
});
