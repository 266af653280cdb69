/**
 * A real service process with the test seam wired from the environment, for tests that need two
 * processes on real sockets. Not part of the service: production starts src/server.ts.
 *   SEAM_HOLD=until-released  hold each command's transaction just before commit, print
 *                             "HELD <messageId>" on stdout, and commit once stdin says "RELEASE"
 *   SEAM_HOLD_MS              or hold it this long
 *   SEAM_FAIL=1               then fail instead of committing
 * Prints "LISTENING <port>" once it accepts connections. SIGTERM/SIGINT run the production graceful
 * shutdown (src/server.ts), bounded by SHUTDOWN_GRACE_MS.
 */
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { buildApp } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import { shutdownGracefully } from '../../src/server.js';

const holdMs = Number(process.env.SEAM_HOLD_MS ?? 0);
const untilReleased = process.env.SEAM_HOLD === 'until-released';
const fail = process.env.SEAM_FAIL === '1';

/** Transactions held until the test releases them. */
const waiting: (() => void)[] = [];
if (untilReleased) {
  createInterface({ input: process.stdin }).on('line', (line) => {
    if (line.trim() === 'RELEASE') for (const release of waiting.splice(0)) release();
  });
}

const config = loadConfig();
const app = await buildApp({
  config,
  logger: { level: process.env.LOG_LEVEL ?? 'warn' },
  testHooks: {
    beforeCommit: async (message) => {
      if (untilReleased) {
        const released = new Promise<void>((resolve) => waiting.push(resolve));
        process.stdout.write(`HELD ${message.messageId}\n`);
        await released;
      }
      if (holdMs > 0) await sleep(holdMs);
      if (fail) throw new Error('injected failure before commit');
    },
  },
});
const address = await app.listen({ port: 0, host: '127.0.0.1' });
process.stdout.write(`LISTENING ${new URL(address).port}\n`);

// The production shutdown, so tests that signal this process exercise what src/server.ts does.
shutdownGracefully(app, config.shutdownGraceMs);
