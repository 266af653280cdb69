/**
 * A stand-in email provider for trying reconciliation by hand (README, "Side effects outside the
 * transaction"): the first request for each Idempotency-Key answers 500, as a provider that sent the
 * email and then failed to say so would; every later request for that key is accepted (202).
 * For the service that 500 leaves the outcome unknown, so the inbox record stays in progress.
 *
 *   npx tsx scripts/flaky-email-provider.ts            # listens on http://127.0.0.1:4010
 *   PORT=4011 npx tsx scripts/flaky-email-provider.ts
 */
import { createServer, type Server } from 'node:http';
import { pathToFileURL } from 'node:url';

/** The provider: a plain HTTP server, not yet listening. It logs one line per request it answers. */
export function flakyEmailProvider(log: (line: string) => void = console.log): Server {
  const seen = new Set<string>();
  return createServer((request, response) => {
    const key = String(request.headers['idempotency-key'] ?? '');
    request.resume();
    request.on('end', () => {
      const first = !seen.has(key);
      seen.add(key);
      log(`${request.method} ${request.url} idempotency-key=${key}: ${first ? '500 (sent, then failed)' : '202 accepted'}`);
      response.writeHead(first ? 500 : 202, { 'content-type': 'application/json' });
      response.end(first ? '{"error":"internal"}' : JSON.stringify({ id: `email-${seen.size}` }));
    });
  });
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const port = Number(process.env.PORT ?? 4010);
  flakyEmailProvider().listen(port, '127.0.0.1', () => {
    console.log(`flaky email provider on http://127.0.0.1:${port}: the first attempt of each key fails after acting`);
  });
}
