import { once } from 'node:events';
import net from 'node:net';

/**
 * A loopback TCP proxy in front of a real PostgreSQL that reads the frontend protocol the service sends
 * and, when armed, cuts the service's connection at the next COMMIT: either after forwarding it (the
 * server commits, the service never hears so: the outcome is unknown to it) or instead of forwarding it
 * (nothing commits). The server's side stays open a moment after a forwarded COMMIT, so the server runs
 * it before it sees the connection go. A COMMIT is a simple Query `commit`, or the Bind of a statement the
 * connection prepared as `commit` (sent behind a transaction's last statement, before the Sync): that
 * one is cut at the Sync that follows it when forwarded (with its Execute), or at the Bind when dropped.
 */
export class CommitCutProxy {
  private armed: 'forward' | 'drop' | undefined;
  private readonly sockets = new Set<net.Socket>();
  /** COMMITs cut so far, forwarded or not. */
  cuts = 0;
  /** Settles once the server answered the last forwarded COMMIT (it ran it), or its side was closed. */
  forwardedAnswered: Promise<void> = Promise.resolve();
  /**
   * Round trips the service asked for so far: each simple Query and each Sync of the extended protocol
   * is a point where it waits for the server's ReadyForQuery.
   */
  roundTrips = 0;

  private constructor(
    private readonly server: net.Server,
    readonly port: number,
  ) {}

  static async start(targetHost: string, targetPort: number): Promise<CommitCutProxy> {
    const server = net.createServer((client) => proxy.relay(client, targetHost, targetPort));
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const proxy = new CommitCutProxy(server, (server.address() as net.AddressInfo).port);
    return proxy;
  }

  /** The next COMMIT on any connection is cut: forwarded to the server first, or dropped. */
  cutAtNextCommit(how: 'forward' | 'drop'): void {
    this.armed = how;
  }

  /** The target's URL with host and port replaced by the proxy's. */
  url(targetUrl: string): string {
    const url = new URL(targetUrl);
    url.hostname = '127.0.0.1';
    url.port = String(this.port);
    return url.toString();
  }

  private relay(client: net.Socket, host: string, port: number): void {
    const upstream = net.connect(port, host);
    for (const socket of [client, upstream]) {
      this.sockets.add(socket);
      socket.on('close', () => this.sockets.delete(socket));
      socket.on('error', () => {
        client.destroy();
        upstream.destroy();
      });
    }
    /** A COMMIT was forwarded and the client cut: the server's side stays until it answers (it then ran it). */
    let awaitingCommit = false;
    client.on('close', () => {
      if (!awaitingCommit) setTimeout(() => upstream.destroy(), 300);
    });
    upstream.on('close', () => client.destroy());
    upstream.pipe(client);

    // Frontend messages: the first (startup, or an SSL/GSS request) has no type byte; each later one is
    // a type byte and a length that counts itself. Bytes are forwarded a whole message at a time.
    let pending = Buffer.alloc(0);
    let startup = true;
    /** Names of the statements this connection prepared with the text `commit`. */
    const commitStatements = new Set<string>();
    /** A COMMIT's Bind was seen: the cut happens at the next Sync. */
    let commitBound = false;
    client.on('data', (chunk: Buffer) => {
      pending = Buffer.concat([pending, chunk]);
      for (;;) {
        const header = startup ? 4 : 5;
        if (pending.length < header) return;
        const length = startup ? pending.readInt32BE(0) : pending.readInt32BE(1) + 1;
        if (pending.length < length) return;
        const message = pending.subarray(0, length);
        pending = pending.subarray(length);
        if (!startup && message[0] === 0x50) {
          // Parse: name\0 text\0 ...
          const [name, text] = message.subarray(5).toString('utf8').split('\0');
          if (/^\s*commit\s*$/i.test(text ?? '')) commitStatements.add(name!);
        }
        if (!startup && message[0] === 0x42 && this.armed !== undefined) {
          // Bind: portal\0 statement\0 ...
          const [, statement] = message.subarray(5).toString('utf8').split('\0');
          if (commitStatements.has(statement!)) commitBound = true;
        }
        const isSync = !startup && message[0] === 0x53;
        // Dropped: at the COMMIT's Bind, before the server can execute it. Forwarded: at the Sync after it.
        const atBoundCommit = commitBound && (this.armed === 'drop' ? message[0] === 0x42 : isSync);
        const isCommit = !startup && ((message[0] === 0x51 && /^\s*commit\b/i.test(message.subarray(5).toString('utf8'))) || atBoundCommit);
        if (isSync) commitBound = false;
        // An SSLRequest or GSSENCRequest is answered 'N' and followed by the real startup message.
        const isEncryptionRequest = startup && length === 8 && [80877103, 80877104].includes(message.readInt32BE(4));
        if (!isEncryptionRequest) startup = false;
        const how = this.armed;
        if (isCommit && how !== undefined) {
          this.armed = undefined;
          this.cuts++;
          if (how === 'forward') {
            // The server's side stays until the server answered the forwarded messages, bounded at 10 s.
            awaitingCommit = true;
            let answered!: () => void;
            this.forwardedAnswered = new Promise<void>((resolve) => (answered = resolve));
            const done = () => {
              upstream.destroy();
              answered();
            };
            // ReadyForQuery ('Z', length 5): the server ran everything up to the Sync (or the simple query).
            const readyForQuery = Buffer.from([0x5a, 0, 0, 0, 5]);
            upstream.on('data', (reply: Buffer) => {
              if (reply.includes(readyForQuery)) done();
            });
            setTimeout(done, 10_000).unref();
            upstream.write(message);
          }
          client.destroy();
          if (how === 'drop') upstream.destroy();
          return;
        }
        if (!startup && (message[0] === 0x51 || message[0] === 0x53)) this.roundTrips++;
        upstream.write(message);
      }
    });
  }

  async close(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
