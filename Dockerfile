# The control plane's image: one executable, `egress-proxies`, whose
# subcommand (worker, bridge, api) picks the process. Compiled JavaScript and
# production dependencies only; runs as a non-root user and writes nothing
# outside /tmp (mount an emptyDir there with readOnlyRootFilesystem: true).
#
#   podman build --build-arg COMMIT=$(git rev-parse HEAD) -t egress-proxies:0.1.0 .
#
# tests/integration/image-contents.test.ts builds the same tree (tsc, then a
# production install into a temporary directory) and runs all three
# processes from it, so a file this image would lack shows there.
ARG NODE_IMAGE=docker.io/library/node:22-bookworm-slim

FROM ${NODE_IMAGE} AS build
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY infra/scripts/write-build-info.mjs infra/scripts/bundle-workflows.mjs infra/scripts/bundle-dashboard.mjs infra/scripts/
COPY activities activities
COPY api api
# cli/ only: `dev`'s servers (local-servers/) are not in the image, and `dev` says so.
COPY cli cli
COPY dashboard dashboard
COPY credentials credentials
COPY forwarding forwarding
COPY tenants tenants
COPY gateway gateway
COPY k8s-bridge k8s-bridge
COPY kube kube
COPY prober prober
COPY providers providers
COPY resources resources
COPY tracing tracing
COPY workflows workflows
ARG COMMIT=unknown
RUN EGRESS_PROXIES_COMMIT=${COMMIT} npm run build

FROM ${NODE_IMAGE} AS prod-deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

FROM ${NODE_IMAGE}
# MALLOC_ARENA_MAX=2: glibc gives each thread that allocates its own malloc
# arena (up to 8 per core), and the worker's threads (the Temporal core's
# runtime, the workflow thread, libuv's pool) each kept what a provisioning
# burst used: 377-388 MiB of worker RSS at 1,000 steady Proxies against
# 258 MiB with two arenas, at the same CPU (npm run bench:memory, which runs
# its processes with this stage's ENV).
ENV NODE_ENV=production HOME=/tmp MALLOC_ARENA_MAX=2
WORKDIR /app
COPY --from=prod-deps /app/node_modules node_modules
COPY --from=build /src/dist dist
COPY package.json ./
COPY bin bin
# The image's own unprivileged user; no shell login, no home outside /tmp.
USER 65532:65532
ENTRYPOINT ["node", "/app/bin/egress-proxies.js"]
CMD ["--help"]
