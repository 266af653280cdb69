import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';

/** Stoplight Prism's validating proxy (a devDependency), in front of a running service, on loopback. */

const require = createRequire(import.meta.url);

function prismEntry(): string {
  const pkg = require.resolve('@stoplight/prism-cli/package.json');
  const { bin } = require(pkg) as { bin: { prism: string } };
  return join(dirname(pkg), bin.prism);
}

/** A free loopback port (Prism cannot be told to pick one and report it). */
export async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  server.close();
  await once(server, 'close');
  return port;
}

export interface PrismProxy {
  readonly baseUrl: string;
  /** What Prism logged so far: every violation it found is a line here. */
  logs(): string;
  stop(): Promise<void>;
}

/**
 * `prism proxy <document> <upstream> --errors`: requests and responses are validated against the
 * document; a violation is logged, marked with an sl-violations header, and (with --errors) turned
 * into an error answer.
 */
export async function startPrismProxy(
  document: string,
  upstream: string,
  options: { validateRequest?: boolean } = {},
  timeoutMs = 60_000,
): Promise<PrismProxy> {
  const port = await freePort();
  const args = [prismEntry(), 'proxy', document, upstream, '--errors', '-p', String(port), '-h', '127.0.0.1'];
  if (options.validateRequest === false) args.push('--validate-request=false');
  const child: ChildProcess = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NO_COLOR: '1' } });
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`prism did not start in ${timeoutMs} ms:\n${output}`)), timeoutMs);
    const poll = setInterval(() => {
      if (/Prism is listening on/.test(output)) {
        clearInterval(poll);
        clearTimeout(timer);
        resolve();
      }
    }, 50);
    child.once('exit', (code) => {
      clearInterval(poll);
      clearTimeout(timer);
      reject(new Error(`prism exited with ${code}:\n${output}`));
    });
  });
  return {
    baseUrl: `http://127.0.0.1:${port}`,
    logs: () => output,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = once(child, 'exit');
      child.kill('SIGTERM');
      const kill = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(kill);
    },
  };
}
