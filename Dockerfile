# Node 24 LTS (kysely needs Node 22+), a fixed release: bump the tag to take Node's fixes.
# ---- build: compile TypeScript to dist/ ----
FROM node:24.18.0-bookworm-slim AS build
WORKDIR /app
# Manifests first, so the dependency layer is reused until they change.
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY . .
RUN npm run build

# ---- runtime: production dependencies + compiled output only (no tsx, no TypeScript) ----
FROM node:24.18.0-bookworm-slim AS runtime
ENV NODE_ENV=production
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force
COPY --from=build /app/dist ./dist
# The default DATABASE_URL (pglite:./data/bookstore) writes under /app/data; the
# node user must own it. Mount a volume there to keep the embedded database.
RUN mkdir -p /app/data && chown node:node /app/data
USER node
ENV HOST=0.0.0.0 PORT=3000
EXPOSE 3000
# /health/ready (not /live) includes the database, so `depends_on: service_healthy`
# in docker-compose.yml waits for replicas that can actually serve.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 3000) + '/health/ready', { signal: AbortSignal.timeout(4000) }).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# Run with an init as PID 1 (`init: true` in docker-compose.yml, `docker run --init`): node as
# PID 1 has no default signal handling, so SIGTERM would be ignored until the service installs
# its own handlers (after the migrations). test/deploy/compose.test.ts runs this command on a build.
CMD ["node", "dist/server.js"]
