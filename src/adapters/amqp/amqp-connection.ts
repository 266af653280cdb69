import { connect, type ChannelModel, type RecoveringChannelModel } from 'amqplib';
import type { Logger } from './logger.js';

export interface AmqpConnectionOptions {
  url: string;
  /** Shown in the broker's management UI and logs (connection_name). */
  name: string;
  log: Logger;
  /** Longest wait between reconnect attempts. */
  maxDelayMs: number;
  /** Declares the topology and opens the channels on each new connection; a throw counts as a failed attempt. */
  setup: (model: ChannelModel) => Promise<void>;
  /** Told when the connection is lost (its channels are gone with it). */
  onDisconnect?: () => void;
}

/** The broker's address for logs, without credentials. */
export function redactAmqpUrl(url: string): string {
  return url.replace(/\/\/[^@/]*@/, '//***@');
}

/**
 * A connection that reconnects by itself: amqplib's connection recovery with capped exponential backoff
 * and jitter, `setup` run on every new connection. It never waits for the first connection, so a broker
 * that is down at start-up delays nothing but messaging. `close()` stops reconnecting.
 */
export async function openAmqpConnection(options: AmqpConnectionOptions): Promise<RecoveringChannelModel> {
  const { log } = options;
  const where = redactAmqpUrl(options.url);
  const connection = await connect(options.url, {
    clientProperties: { connection_name: options.name },
    recovery: {
      initialDelay: 200,
      maxDelay: options.maxDelayMs,
      waitForConnect: false,
      setup: async (model: ChannelModel) => {
        // amqplib listens on a model only once its setup has succeeded. A connection lost while setup is
        // still declaring (a broker restarting just after the handshake) emits 'error' on the model
        // before that, and an 'error' with no listener ends the process. Listen from the start: the
        // failure still reaches setup as a rejected operation, and counts as a failed attempt. The
        // listener stays for the model's life (a model closed unbound, at shutdown or after a failed
        // setup, can still emit), logging only until amqplib's own listener takes over.
        let settingUp = true;
        model.on('error', (error: Error) => {
          if (settingUp) log.warn({ broker: where, connection: options.name, err: error }, 'AMQP connection lost during setup');
        });
        try {
          await options.setup(model);
        } finally {
          settingUp = false;
        }
      },
    },
  });
  let lost = false;
  connection.on('connect', () => {
    log.info({ broker: where, connection: options.name }, lost ? 'AMQP connection restored' : 'AMQP connected');
    lost = false;
  });
  connection.on('disconnect', (error: Error) => {
    lost = true;
    options.onDisconnect?.();
    log.warn({ broker: where, connection: options.name, err: error }, 'AMQP connection lost; reconnecting');
  });
  connection.on('reconnect-scheduled', (info: { attempt: number; delay: number; error: Error }) => {
    log.warn(
      { broker: where, connection: options.name, attempt: info.attempt, delayMs: info.delay, reason: info.error.message },
      'AMQP connect failed; retrying',
    );
  });
  connection.on('error', (error: Error) => log.warn({ broker: where, connection: options.name, err: error }, 'AMQP connection error'));
  connection.on('blocked', (reason: string) =>
    log.warn({ connection: options.name, reason }, 'AMQP connection blocked by the broker (resource alarm)'),
  );
  connection.on('unblocked', () => log.info({ connection: options.name }, 'AMQP connection unblocked'));
  return connection;
}

/**
 * How long closing a channel or a connection waits for the broker's answer. amqplib settles a close
 * only when the broker confirms it: a socket that dies first (the broker going away while the service
 * shuts down) would leave the close pending forever, and the shutdown with it.
 */
export const AMQP_CLOSE_TIMEOUT_MS = 2000;

/**
 * Closes a channel or a connection, waiting at most `timeoutMs` for the broker's confirmation. A
 * failure is ignored: what is being closed is going either way, and a connection closed this way
 * stops reconnecting before the wait starts.
 */
export async function closeWithin(close: () => Promise<unknown>, timeoutMs: number = AMQP_CLOSE_TIMEOUT_MS): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, timeoutMs);
  });
  try {
    await Promise.race([close().catch(() => {}), timedOut]);
  } finally {
    clearTimeout(timer);
  }
}
