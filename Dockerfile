# The service image: Node 20 running the TypeScript sources through the tsx loader.
FROM node:20-slim

ENV NODE_ENV=production \
    APP_ENV=production \
    PORT=8000 \
    HOST=0.0.0.0 \
    DATA_DIR=/app/.data \
    PROFILING_OUTPUT_DIR=/app/profiling_reports

WORKDIR /app

# Dependencies first so source edits reuse this layer. tsx is a runtime dependency (the loader).
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

# Sources, migrations, config, proto (.dockerignore keeps tests, data and secrets out).
COPY . .

# Runs as the image's unprivileged `node` user; it owns only the writable directories.
RUN mkdir -p /app/.data /app/profiling_reports && chown -R node:node /app/.data /app/profiling_reports
USER node

EXPOSE 8000

# node itself is PID 1's only child of interest: no npm/sh wrapper, so SIGTERM reaches the
# service and it shuts down gracefully (CONTRACT §9 "Signals").
CMD ["node", "--import", "tsx", "src/main.ts"]
