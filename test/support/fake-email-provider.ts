import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A stand-in email provider: a real HTTP server on loopback that records what it receives and can
 * be told to accept, refuse (answer `status` without delivering), fail after delivering (a gateway
 * that answers `status` after the provider acted), reset the connection after reading the request,
 * hang, hold (answer only when the test says so), or deduplicate by Idempotency-Key the way real
 * providers do.
 */
export type ProviderMode = 'accept' | 'refuse' | 'fail-after-delivery' | 'reset' | 'hang' | 'hold';

export interface ReceivedEmail {
  idempotencyKey: string | undefined;
  body: { to: string; subject: string; text: string };
}

export class FakeEmailProvider {
  mode: ProviderMode = 'accept';
  /** The status answered in the refuse and fail-after-delivery modes. */
  status = 500;
  /** Every request that reached the provider. */
  readonly requests: ReceivedEmail[] = [];
  /** The emails actually delivered: with deduplication on, one per Idempotency-Key. */
  readonly delivered: ReceivedEmail[] = [];
  private readonly server: Server;
  private readonly hanging = new Set<ServerResponse>();
  private held: ((status: number) => void)[] = [];

  constructor(readonly deduplicates: boolean) {
    this.server = createServer((req, res) => void this.handle(req, res));
  }

  async start(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/emails`;
  }

  /** Answers every held request as accepted (and accepts from now on). */
  releaseHeld(): void {
    this.mode = 'accept';
    for (const answer of this.held.splice(0)) answer(202);
  }

  /** Answers the oldest held request: a 2xx accepts it, anything else refuses it without delivering. */
  answerOldestHeld(status: number): void {
    const answer = this.held.shift();
    if (answer === undefined) throw new Error('no request is held');
    answer(status);
  }

  async stop(): Promise<void> {
    for (const res of this.hanging) res.destroy();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const email: ReceivedEmail = {
      idempotencyKey: req.headers['idempotency-key'] as string | undefined,
      body: JSON.parse(Buffer.concat(chunks).toString('utf8')) as ReceivedEmail['body'],
    };
    this.requests.push(email);
    if (this.mode === 'hang') {
      this.hanging.add(res);
      return;
    }
    if (this.mode === 'hold') {
      this.held.push((status) => {
        if (status < 300) this.accept(email, res);
        else res.writeHead(status, { 'content-type': 'application/json' }).end('{"error":"refused"}');
      });
      return;
    }
    if (this.mode === 'reset') {
      req.socket.destroy();
      return;
    }
    if (this.mode === 'refuse' || this.mode === 'fail-after-delivery') {
      if (this.mode === 'fail-after-delivery') this.deliver(email);
      res.writeHead(this.status, { 'content-type': 'application/json' }).end('{"error":"mailbox unavailable"}');
      return;
    }
    this.accept(email, res);
  }

  /** Delivers the email unless a provider that deduplicates delivered its key before; true when it was seen. */
  private deliver(email: ReceivedEmail): boolean {
    const seen = this.deduplicates && this.delivered.some((d) => d.idempotencyKey === email.idempotencyKey);
    if (!seen) this.delivered.push(email);
    return seen;
  }

  private accept(email: ReceivedEmail, res: ServerResponse): void {
    const seen = this.deliver(email);
    res.writeHead(seen ? 200 : 202, { 'content-type': 'application/json' }).end(JSON.stringify({ id: `em_${email.idempotencyKey}` }));
  }
}
