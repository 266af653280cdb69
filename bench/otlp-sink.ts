import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A stand-in OTLP/HTTP collector for the tracing bench variant: answers every export request 200 with an
 * empty ExportTraceServiceResponse after reading its body, and counts the requests and bytes. Run it, then
 * point the service at it: `--variant on=dist/server.js,OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:<port>`.
 *
 *   npx tsx bench/otlp-sink.ts [--port 4318]
 */
const portFlag = process.argv.indexOf('--port');
const port = portFlag === -1 ? 4318 : Number(process.argv[portFlag + 1]);
let requests = 0;
let bytes = 0;
const server = createServer((req, res) => {
  req.on('data', (chunk: Buffer) => (bytes += chunk.length));
  req.on('end', () => {
    requests++;
    res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
  });
});
server.listen(port, '127.0.0.1', () => {
  console.log(`OTLP sink on http://127.0.0.1:${(server.address() as AddressInfo).port}`);
});
const report = () => console.log(`OTLP sink: ${requests} export requests, ${(bytes / 1e6).toFixed(1)} MB`);
process.on('SIGINT', () => {
  report();
  process.exit(0);
});
process.on('SIGTERM', () => {
  report();
  process.exit(0);
});
