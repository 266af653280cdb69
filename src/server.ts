import closeWithGrace from 'close-with-grace';
import { buildApp } from './app.js';
import { ConfigError, loadConfig } from './config.js';

/** The only file that listens: config -> buildApp -> listen, and a graceful close on signals. */

let config;
try {
  config = loadConfig();
} catch (error) {
  if (error instanceof ConfigError) {
    console.error(`configuration error: ${error.message}`);
    process.exit(2);
  }
  throw error;
}

const app = await buildApp({ config });
if (config.webhookSecret === undefined) {
  app.log.warn('WEBHOOK_SECRET is not set: commands are accepted without authentication (unsigned deliveries)');
}

closeWithGrace({ delay: 10_000, logger: app.log }, async ({ signal, err }) => {
  if (err !== undefined) app.log.error({ err }, 'shutting down after an error');
  else app.log.info({ signal }, 'shutting down: finishing in-flight requests');
  await app.close();
});

await app.listen({ port: config.port, host: config.host });
