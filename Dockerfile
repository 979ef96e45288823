# The service image: Node 24 running plain JavaScript (dist/, the sources with their types
# stripped by `npm run build`; no loader, no wrapper process). Two stages: the production
# dependencies are installed and dist/ is built in the first, so the final image carries neither
# npm's cache nor a dev dependency.
#
# The base image is pinned to a Node release (the same in both stages), so a rebuild brings the
# same runtime. A tag can still be re-pushed (the official images are rebuilt for Debian updates), a
# digest cannot: a CI that publishes the image should pin `FROM node:24.21.0-slim@sha256:<digest>`,
# the digest from `docker buildx imagetools inspect node:24.21.0-slim`, and bump both together.
FROM node:24.21.0-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund
COPY scripts/build.ts scripts/
COPY src src
RUN npm run build

FROM node:24.21.0-slim
ENV NODE_ENV=production \
    APP_ENV=production \
    PORT=8000 \
    HOST=0.0.0.0 \
    DATA_DIR=/app/.data \
    PROFILING_OUTPUT_DIR=/app/profiling_reports
WORKDIR /app

COPY --from=deps /app/node_modules ./node_modules
# What dist/ reads at run time, and nothing else (no README, docs, tests, CI scripts or the
# development users file): package.json (the version in app_info), the migrations (applied at
# start; `node dist/migrate.js` runs them alone) and the WebSocket .proto. Then the built service.
COPY package.json ./
COPY migrations migrations
COPY proto proto
COPY --from=deps /app/dist ./dist

# Runs as the image's unprivileged `node` user; it owns only the writable directories.
RUN mkdir -p /app/.data /app/profiling_reports && chown -R node:node /app/.data /app/profiling_reports
USER node

EXPOSE 8000

# Liveness with what the image has (no curl): /livez answers 200 while the process can answer at
# all (docs/operations.md). Not /health or /readyz: a database outage makes those 503, and must not mark
# the container unhealthy (and get it restarted).
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.PORT||8000)+'/livez').then(r=>process.exit(r.status===200?0:1),()=>process.exit(1))"]

# node itself is PID 1: no npm/sh wrapper, so SIGTERM reaches the service and it drains
# gracefully (docs/operations.md, "Shutdown"). The young generation is capped at 2 × 32 MB, as
# `npm start` runs it (docs/performance.md#memory).
CMD ["node", "--max-semi-space-size=32", "dist/main.js"]
