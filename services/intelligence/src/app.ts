import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import {
  identityReplicaMigrations,
  kernelMigrations,
  type MigrationTrack,
  platformPlugin,
  replicaOptions,
  replicasPlugin,
} from '@onto/shared';
import type { FastifyPluginAsync } from 'fastify';
import fp from 'fastify-plugin';
import actions from './actions/plugin.js';
import { adminRoutes } from './admin/routes.js';
import type { Config } from './config.js';
import consistency from './consistency.js';
import { decisionRoutes } from './decisions/routes.js';
import type { DefinitionWriter } from './definition-routes.js';
import { derivedRoutes } from './derived/routes.js';
import objectSets from './engine/object-set-routes.js';
import evaluation from './engine/plugin.js';
import identity from './identity/plugin.js';
import type { Kind } from './merges/history.js';
import merges from './merges/plugin.js';
import positions from './positions/announcer.js';
import { readModelRoutes } from './readmodel/routes.js';
import { alertRoutes } from './rules/alert-routes.js';
import { ruleRoutes } from './rules/routes.js';
import schema from './schema/plugin.js';
import worlds from './worlds/plugin.js';
import retention from './worlds/retention.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** Each kind's PUT and DELETE in a caller's transaction: how a merge writes definitions (docs/adr/0039). */
    definitionWriters: Record<Kind, DefinitionWriter>;
  }
}

const { version } = createRequire(import.meta.url)('../package.json') as { version: string };

export const migrations: MigrationTrack[] = [
  kernelMigrations,
  identityReplicaMigrations,
  { directory: fileURLToPath(new URL('../migrations', import.meta.url)), table: 'intelligence_migrations' },
];

/** The intelligence service: derived properties, rules and alerts, decisions and idempotent actions. */
const app: FastifyPluginAsync<{ config: Config }> = async (fastify, { config }) => {
  await fastify.register(platformPlugin, {
    service: 'intelligence',
    version,
    description: 'onto intelligence: derived properties, rules and alerts, decisions and idempotent actions',
    config,
    migrations,
  });
  // Its writes answer `data=<watermark>`, not a version of its own: they carry its position too.
  await fastify.register(replicasPlugin, replicaOptions('intelligence', config, { positionOnEveryToken: true }));
  fastify.decorate('definitionQuota', config.MAX_DEFINITIONS_PER_WORLD);
  await fastify.register(identity, { config });
  await fastify.register(worlds);
  await fastify.register(schema, { waitBoundMs: config.CONSISTENCY_WAIT_MS });
  await fastify.register(consistency, { waitBoundMs: config.CONSISTENCY_WAIT_MS });
  await fastify.register(evaluation, {
    seriesKeepMarginMs: config.SERIES_KEEP_MARGIN_MS,
    // The actions API (registered below) starts a decision's action in the evaluation's transaction.
    actions: () => (fastify.hasDecorator('actions') ? fastify.actions : undefined),
  });
  // The routes of the read model, the definitions and the operators, on the engine; a kind's
  // writer is how a merge writes its definitions (docs/adr/0039).
  await readModelRoutes(fastify);
  const derived = await derivedRoutes(fastify, fastify.engine);
  await adminRoutes(fastify, fastify.engine);
  const rule = await ruleRoutes(fastify, fastify.engine);
  await alertRoutes(fastify);
  const decision = await decisionRoutes(fastify, fastify.engine);
  fastify.decorate('definitionWriters', { derived, rule, decision });
  await fastify.register(merges);
  await fastify.register(retention, {
    batch: config.RETENTION_PRUNE_BATCH,
    graceMs: config.RETENTION_PRUNE_GRACE_MS,
  });
  await fastify.register(objectSets, { scanLimit: config.QUERY_SCAN_LIMIT, tokenSecret: config.QUERY_TOKEN_SECRET });
  await fastify.register(actions, {
    redisNamespace: `${fastify.topicPrefix}${new URL(config.DATABASE_URL).pathname.slice(1)}:`,
    keyTtlMs: config.IDEMPOTENCY_KEY_TTL_MS,
    lockMs: config.IDEMPOTENCY_LOCK_MS,
    pruneIntervalMs: config.IDEMPOTENCY_PRUNE_INTERVAL_MS,
    stepRetryMs: config.ACTION_STEP_RETRY_MS,
  });
  await fastify.register(positions, { intervalMs: config.POSITION_ANNOUNCE_MS });
};

// Not encapsulated: the server (and tests) see what the service decorates the instance with.
export default fp(app, { name: 'onto-intelligence' });
