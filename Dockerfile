# syntax=docker/dockerfile:1
# portcullis: Node runs the TypeScript sources directly (type stripping), so there is no build
# step, only production dependencies.

FROM node:24-slim AS dependencies
WORKDIR /app
COPY package.json package-lock.json ./
# Production dependencies only, at the lockfile's versions; no install scripts (none is needed at
# run time).
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force

FROM node:24-slim
ENV NODE_ENV=production
# The shipped environment beside Node's flags (src/cli/node-flags.ts).
ENV MALLOC_ARENA_MAX=2
WORKDIR /app
COPY --from=dependencies /app/node_modules ./node_modules
COPY package.json ./
COPY protos ./protos
COPY src ./src
# The image's unprivileged `node` user, by number so Kubernetes can verify runAsNonRoot; the
# application files stay root-owned and read-only to it.
USER 1000:1000
# ext_authz gRPC, internal gRPC (authn-api), admin HTTP.
EXPOSE 9001 9002 9090
# Node's flags are portcullis's shipped ones (src/cli/node-flags.ts; test/deploy/node-flags.test.ts).
ENTRYPOINT ["node", "--max-semi-space-size=8", "--heap-growing-percent=50", "src/cli/main.ts"]
CMD ["--config", "/etc/portcullis/config.yaml"]
