/**
 * Writes openapi/openapi.json from the route schemas (`npm run openapi`). test/openapi.test.ts fails
 * when the committed file and the routes drift apart.
 */
import { writeFile } from 'node:fs/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { FastifyInstance } from 'fastify';
import { buildApp, type BuildAppOptions } from '../src/app.js';

export const OPENAPI_FILE = fileURLToPath(new URL('../openapi/openapi.json', import.meta.url));

/** How the document's app is built; the drift test builds its app the same way. */
export const OPENAPI_APP_OPTIONS: BuildAppOptions = { logger: false, config: { databaseUrl: 'pglite:memory' } };

/** The document a ready app serves, as plain JSON data (no shared objects, no undefined). */
export function openApiDocument(app: FastifyInstance): unknown {
  return JSON.parse(JSON.stringify(app.swagger()));
}

/** The OpenAPI document, from an app on a throwaway in-memory database. */
export async function generateOpenApi(): Promise<unknown> {
  const app = await buildApp(OPENAPI_APP_OPTIONS);
  try {
    await app.ready();
    return openApiDocument(app);
  } finally {
    await app.close();
  }
}

/** The file's exact text: 2-space JSON with a trailing newline, so regenerating it is a no-op diff. */
export function formatOpenApi(document: unknown): string {
  return `${JSON.stringify(document, null, 2)}\n`;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await writeFile(OPENAPI_FILE, formatOpenApi(await generateOpenApi()));
  console.log(`wrote ${OPENAPI_FILE}`);
}
