# One image for the three services; compose picks the service with its command.
# syntax=docker/dockerfile:1.7
FROM node:20-bookworm-slim AS base
ENV PNPM_HOME=/pnpm PATH=/pnpm:$PATH CI=true
RUN npm install -g pnpm@12.4.2
WORKDIR /app

# Dependencies first, from the manifests alone, so that code changes reuse this layer.
FROM base AS deps
COPY pnpm-lock.yaml pnpm-workspace.yaml package.json ./
COPY patches patches
COPY packages/shared/package.json packages/shared/
COPY packages/console/package.json packages/console/
COPY services/control/package.json services/control/
COPY services/data/package.json services/data/
COPY services/intelligence/package.json services/intelligence/
RUN pnpm install --frozen-lockfile

FROM deps AS build
COPY tsconfig.base.json tsconfig.json ./
COPY packages packages
COPY services services
RUN pnpm exec tsc -b packages/shared services/control services/data services/intelligence
# The console's bundle, which control serves under /console.
RUN node packages/console/build.mjs

# Production dependencies only, with the compiled output and migrations beside them.
FROM base AS runtime
ENV NODE_ENV=production
COPY --from=deps /app/pnpm-lock.yaml /app/pnpm-workspace.yaml /app/package.json ./
COPY --from=deps /app/patches patches
COPY --from=deps /app/packages/shared/package.json packages/shared/
COPY --from=deps /app/packages/console/package.json packages/console/
COPY --from=deps /app/services/control/package.json services/control/
COPY --from=deps /app/services/data/package.json services/data/
COPY --from=deps /app/services/intelligence/package.json services/intelligence/
RUN pnpm install --frozen-lockfile --prod
COPY --from=build /app/packages/shared/dist packages/shared/dist
COPY --from=build /app/packages/shared/migrations packages/shared/migrations
COPY --from=build /app/packages/shared/migrations-identity-replica packages/shared/migrations-identity-replica
COPY --from=build /app/packages/console/dist packages/console/dist
COPY --from=build /app/services/control/dist services/control/dist
COPY --from=build /app/services/control/migrations services/control/migrations
COPY --from=build /app/services/data/dist services/data/dist
COPY --from=build /app/services/data/migrations services/data/migrations
COPY --from=build /app/services/intelligence/dist services/intelligence/dist
COPY --from=build /app/services/intelligence/migrations services/intelligence/migrations
USER node
CMD ["node", "services/control/dist/server.js"]
