import type { FastifyInstance } from 'fastify';
import { consoleAssets } from '../../admin/assets.js';
import { adminGuard } from '../../http/admin-guard.js';
import { problemResponses, ProblemError } from '../../http/problem.js';
import { AssetParams } from './console.schemas.js';

/**
 * The operator console at /console: one page and its bundle, nothing else. The page holds no data and no
 * decisions: everything it shows or does is an admin route (with the bearer token typed into the page),
 * the same routes a script uses. With no ADMIN_TOKEN set, the page too answers loopback clients only.
 */

const PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Bookstore Inventory · operator console</title>
<link rel="stylesheet" href="console/assets/console.css">
<script type="module" src="console/assets/console.js"></script>
</head>
<body>
<noscript>The console needs JavaScript; every view is also an admin route (see /docs).</noscript>
<div id="app"></div>
</body>
</html>
`;

/** Only what the service serves: no other origin, no inline script. */
const CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const ASSET_TYPES = { 'console.js': 'text/javascript; charset=utf-8', 'console.css': 'text/css; charset=utf-8' } as const;

/** The console page and its assets. */
export async function consoleRoutes(app: FastifyInstance): Promise<void> {
  const loopbackOnly = app.config.adminToken === undefined ? adminGuard(app.config) : undefined;
  const onRequest = loopbackOnly === undefined ? [] : [loopbackOnly];

  app.get(
    '/console',
    {
      onRequest,
      schema: {
        operationId: 'console',
        tags: ['operations'],
        summary: 'The operator console (HTML): overview, side effects to settle, dead letters, one key, the outbox',
        description:
          'A page over the admin routes: it asks for ADMIN_TOKEN and sends it as the bearer token of every call. Nothing on it ' +
          'comes from another origin.',
        security: [],
        response: {
          200: { description: 'The page', content: { 'text/html': { schema: { type: 'string' } } } },
          ...problemResponses('forbidden', 'untrusted-host'),
        },
      },
    },
    async (_request, reply) =>
      reply.type('text/html; charset=utf-8').header('content-security-policy', CSP).header('cache-control', 'no-cache').send(PAGE),
  );

  app.get<{ Params: { file: string } }>(
    '/console/assets/:file',
    {
      onRequest,
      schema: {
        operationId: 'consoleAsset',
        tags: ['operations'],
        summary: "The console's script and style sheet",
        security: [],
        params: AssetParams,
        response: {
          200: {
            description: 'The bundled asset',
            content: { 'text/javascript': { schema: { type: 'string' } }, 'text/css': { schema: { type: 'string' } } },
          },
          ...problemResponses('invalid-request', 'forbidden', 'untrusted-host', 'not-found'),
        },
      },
    },
    async (request, reply) => {
      const file = request.params.file as keyof typeof ASSET_TYPES;
      const assets = await consoleAssets();
      const body = file === 'console.js' ? assets.js : assets.css;
      if (body === '') throw new ProblemError('not-found', { detail: `${file} is empty in this build` });
      return reply.type(ASSET_TYPES[file]).header('cache-control', 'no-cache').send(body);
    },
  );
}
