import assert from 'node:assert/strict';
import { once } from 'node:events';
import { describe, test, type TestContext } from 'node:test';
import type { ChannelModel } from 'amqplib';
import { closeWithin, openAmqpConnection } from '../../src/adapters/amqp/amqp-connection.js';
import type { Logger } from '../../src/adapters/amqp/logger.js';
import { amqpUrl, skipWithoutAmqp } from '../support/amqp.js';
import { TcpProxy } from '../support/tcp-proxy.js';

/**
 * The reconnecting connection on a real RabbitMQ, behind a loopback proxy that cuts it: a connection lost
 * while `setup` is still declaring (the broker restarting between the handshake and the first channel)
 * is one more failed attempt, never an unhandled 'error' that ends the process.
 */

function recordingLogger(): Logger & { warnings: string[] } {
  const warnings: string[] = [];
  return {
    warnings,
    info: () => {},
    warn: (_fields, message) => warnings.push(message),
    error: (_fields, message) => warnings.push(message),
  };
}

describe('the reconnecting AMQP connection', { skip: skipWithoutAmqp }, () => {
  for (const how of ['closed', 'reset'] as const) {
    test(`a connection ${how} during setup is retried, and the process keeps running`, { timeout: 30_000 }, async (t) => {
      const proxy = await TcpProxy.start('127.0.0.1', Number(new URL(amqpUrl!).port || 5672));
      const uncaught: Error[] = [];
      const onUncaught = (error: Error) => uncaught.push(error);
      // Recorded rather than left to the runner, so the test can say what happened.
      process.prependListener('uncaughtException', onUncaught);
      t.after(() => process.removeListener('uncaughtException', onUncaught));

      const log = recordingLogger();
      let attempts = 0;
      const connection = await openAmqpConnection({
        url: proxy.url(amqpUrl!),
        name: 'amqp-connection test',
        log,
        maxDelayMs: 200,
        setup: async (model: ChannelModel) => {
          attempts += 1;
          if (attempts === 1) {
            // The handshake is done; the connection goes before the first channel opens.
            if (how === 'reset') proxy.reset();
            else proxy.cut();
            await new Promise((resolve) => setTimeout(resolve, 100));
            proxy.restore();
          }
          const channel = await model.createChannel();
          await channel.close();
        },
      });
      // The connection before the proxy: closing it needs the broker's answer.
      t.after(async () => {
        await connection.close();
        await proxy.close();
      });
      const [model] = (await once(connection, 'connect')) as [ChannelModel];

      assert.deepEqual(uncaught, [], 'no error escaped to the process');
      assert.equal(attempts, 2, 'the first attempt failed in setup, the second succeeded');
      assert.ok(log.warnings.includes('AMQP connection lost during setup'), log.warnings.join('\n'));
      assert.ok(log.warnings.includes('AMQP connect failed; retrying'), log.warnings.join('\n'));
      const channel = await model.createChannel();
      await channel.close();
    });
  }

  /** A connection through a proxy of its own, connected; the proxy closes when the test ends. */
  async function connectedBehindProxy(t: TestContext) {
    const proxy = await TcpProxy.start('127.0.0.1', Number(new URL(amqpUrl!).port || 5672));
    t.after(() => proxy.close());
    const connection = await openAmqpConnection({
      url: proxy.url(amqpUrl!),
      name: 'amqp-connection test',
      log: recordingLogger(),
      maxDelayMs: 200,
      setup: async () => {},
    });
    await once(connection, 'connect');
    return { proxy, connection };
  }

  /** 'settled' if `closing` settles within 3 s, else 'pending'. */
  function settlesSoon(closing: Promise<unknown>): Promise<'settled' | 'pending'> {
    return Promise.race([
      closing.then(() => 'settled' as const),
      new Promise<'pending'>((resolve) => setTimeout(resolve, 3000, 'pending')),
    ]);
  }

  test(
    'a close whose connection dies before the broker confirms it still settles: the shutdown goes on',
    { timeout: 30_000 },
    async (t) => {
      // The broker's side goes while the close is on its way: amqplib's own close never settles then.
      const unbounded = await connectedBehindProxy(t);
      await unbounded.proxy.close();
      assert.equal(
        await settlesSoon(unbounded.connection.close()),
        'pending',
        'without a bound, the close waits for an answer that never comes',
      );

      // The same, bounded.
      const bounded = await connectedBehindProxy(t);
      await bounded.proxy.close();
      assert.equal(await settlesSoon(closeWithin(() => bounded.connection.close(), 500)), 'settled');
    },
  );
});
