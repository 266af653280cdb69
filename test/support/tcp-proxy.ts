import { once } from 'node:events';
import net from 'node:net';

/**
 * A loopback TCP proxy in front of a real server (RabbitMQ, PostgreSQL), to cut the connection the way
 * an outage does: `cut()` destroys every open connection and refuses new ones (`reset()` with a TCP reset),
 * `restore()` forwards again.
 */
export class TcpProxy {
  private readonly sockets = new Set<net.Socket>();
  private up = true;

  private constructor(
    private readonly server: net.Server,
    readonly port: number,
  ) {}

  static async start(targetHost: string, targetPort: number): Promise<TcpProxy> {
    // The handler runs only for connections, which come after `proxy` below is set.
    const server = net.createServer((client) => {
      if (!proxy.up) {
        client.destroy();
        return;
      }
      const upstream = net.connect(targetPort, targetHost);
      for (const socket of [client, upstream]) {
        proxy.sockets.add(socket);
        socket.on('close', () => proxy.sockets.delete(socket));
        socket.on('error', () => {
          client.destroy();
          upstream.destroy();
        });
      }
      client.pipe(upstream);
      upstream.pipe(client);
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const proxy = new TcpProxy(server, (server.address() as net.AddressInfo).port);
    return proxy;
  }

  /** The target's URL with host and port replaced by the proxy's. */
  url(targetUrl: string): string {
    const url = new URL(targetUrl);
    url.hostname = '127.0.0.1';
    url.port = String(this.port);
    return url.toString();
  }

  cut(): void {
    this.up = false;
    for (const socket of this.sockets) socket.destroy();
  }

  /** As `cut()`, but each connection ends with a TCP reset (ECONNRESET at both ends), as a crashed peer's does. */
  reset(): void {
    this.up = false;
    for (const socket of this.sockets) socket.resetAndDestroy();
  }

  restore(): void {
    this.up = true;
  }

  async close(): Promise<void> {
    this.cut();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
