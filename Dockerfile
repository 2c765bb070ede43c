# syntax=docker/dockerfile:1
# portcullis: Node runs the TypeScript sources directly (type stripping). The one thing built is
# build/kubernetes-client.js, the parts of @kubernetes/client-node portcullis uses bundled into one
# module (src/kube-fleet/kubernetes-client.ts says why); the rest is production dependencies.

FROM node:24-slim AS dependencies
WORKDIR /app
COPY package.json package-lock.json ./
# Production dependencies only, at the lockfile's versions; no install scripts (none is needed at
# run time).
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force

FROM node:24-slim AS kubernetes-client
WORKDIR /app
COPY package.json package-lock.json ./
# Every dependency at the lockfile's versions (esbuild is a devDependency); no install scripts:
# esbuild's binary comes as its platform's package, and the bundle is built by the next RUN.
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY scripts/bundle-kubernetes-client.ts ./scripts/
COPY src/kube-fleet/kubernetes-client.ts ./src/kube-fleet/
RUN node scripts/bundle-kubernetes-client.ts

FROM node:24-slim
# tini is the container's init (PID 1) and runs node as its child. The kernel drops every signal sent
# to a PID namespace's init from inside it unless init handles that signal, SIGKILL included: node as
# PID 1 could not be killed by its watchdog (src/server/watchdog.ts), so a frozen event loop would
# hang there until the liveness probe. tini forwards SIGTERM to node and exits with its status.
# libjemalloc2: the allocator Node runs on (LD_PRELOAD below; src/cli/node-flags.ts says why).
RUN apt-get update && apt-get install -y --no-install-recommends tini libjemalloc2 && rm -rf /var/lib/apt/lists/*
ENV NODE_ENV=production
# The shipped environment beside Node's flags (src/cli/node-flags.ts); the allocator's is set below.
ENV MALLOC_ARENA_MAX=2
ENV MALLOC_MMAP_THRESHOLD_=262144
ENV NODE_COMPILE_CACHE=node_modules/.cache/node-compile-cache
WORKDIR /app
COPY --from=dependencies /app/node_modules ./node_modules
COPY package.json ./
COPY protos ./protos
COPY src ./src
COPY --from=kubernetes-client /app/build ./build
# Node's compile cache (NODE_COMPILE_CACHE, relative to /app), filled here because the pod's root
# filesystem is read-only: every module's stripped source and code cache, so a start never loads
# amaro to strip types. Written as uid 1000 with the ENTRYPOINT's flags (both name the cache's
# subdirectory: another uid or other flags would find it empty), then root-owned like the rest, and
# readable by all (Node writes its entries owner-only).
RUN mkdir -p "$NODE_COMPILE_CACHE" && chown 1000:1000 "$NODE_COMPILE_CACHE" \
 && setpriv --reuid=1000 --regid=1000 --clear-groups node --max-semi-space-size=8 --heap-growing-percent=100 --max-old-space-size=256 --no-allocation-site-pretenuring --expose-gc src/cli/main.ts --help > /dev/null \
 && setpriv --reuid=1000 --regid=1000 --clear-groups node --max-semi-space-size=8 --heap-growing-percent=100 --max-old-space-size=256 --no-allocation-site-pretenuring --expose-gc src/cli/warm-compile-cache.ts \
 && chown -R root:root "$NODE_COMPILE_CACHE" && chmod -R a+rX "$NODE_COMPILE_CACHE"
# Node's allocator, jemalloc (src/cli/node-flags.ts), for every process from here on: set after the
# build steps, because setpriv running on jemalloc with its background thread aborts on --regid.
ENV LD_PRELOAD=libjemalloc.so.2
ENV MALLOC_CONF=background_thread:true
# The image's unprivileged `node` user, by number so Kubernetes can verify runAsNonRoot; the
# application files stay root-owned and read-only to it.
USER 1000:1000
# ext_authz gRPC, internal gRPC (authn-api), admin HTTP.
EXPOSE 9001 9002 9090
# Node's flags are portcullis's shipped ones (src/cli/node-flags.ts; test/deploy/node-flags.test.ts);
# test/server/watchdog.pid1.process.test.ts runs this ENTRYPOINT as a PID namespace's init.
ENTRYPOINT ["tini", "--", "node", "--max-semi-space-size=8", "--heap-growing-percent=100", "--max-old-space-size=256", "--no-allocation-site-pretenuring", "--expose-gc", "src/cli/main.ts"]
CMD ["--config", "/etc/portcullis/config.yaml"]
