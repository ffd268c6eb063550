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
import adminRoutes from './admin/routes.js';
import bulk from './bulk/routes.js';
import cdc from './cdc/plugin.js';
import type { Config } from './config.js';
import identity from './identity/plugin.js';
import links from './links/routes.js';
import live from './live/plugin.js';
import merges from './merges/consumer.js';
import objectSets from './objects/query.js';
import objects from './objects/routes.js';
import positions from './positions/plugin.js';
import schema from './schema/plugin.js';
import series from './series/plugin.js';
import { startReplicaCuts } from './storage/replica-cut.js';
import webhooks from './webhooks/plugin.js';
import diff from './worlds/diff.js';
import worlds from './worlds/plugin.js';
import retention from './worlds/retention.js';

const { version } = createRequire(import.meta.url)('../package.json') as { version: string };

export const migrations: MigrationTrack[] = [
  kernelMigrations,
  identityReplicaMigrations,
  { directory: fileURLToPath(new URL('../migrations', import.meta.url)), table: 'data_migrations' },
];

/** The data service: objects and links of every world, their version history, bulk ingest and CDC. */
const app: FastifyPluginAsync<{ config: Config }> = async (fastify, { config }) => {
  await fastify.register(platformPlugin, {
    service: 'data',
    version,
    description: 'onto data: objects and links of every world with their version history, bulk ingest and CDC',
    config,
    migrations,
  });
  await fastify.register(replicasPlugin, replicaOptions('data', config));
  if (config.DATABASE_REPLICA_URLS) {
    // Commit points the replicas serve lists and queries at (docs/adr/0083).
    const cuts = startReplicaCuts(fastify, config.REPLICA_CUT_MS);
    fastify.addHook('onClose', async () => cuts.stop());
  }
  await fastify.register(identity, { config });
  await fastify.register(worlds);
  await fastify.register(retention, {
    batch: config.RETENTION_PRUNE_BATCH,
    graceMs: config.RETENTION_PRUNE_GRACE_MS,
    intervalMs: config.RETENTION_PRUNE_INTERVAL_MS,
  });
  await fastify.register(schema, { waitBoundMs: config.CONSISTENCY_WAIT_MS });
  await fastify.register(objects, {
    groups: { inFlight: config.WRITE_GROUPS_IN_FLIGHT, maxGroup: config.WRITE_GROUP_MAX },
  });
  await fastify.register(objectSets, {
    scanLimit: config.QUERY_SCAN_LIMIT,
    tokenTtlMs: config.QUERY_TOKEN_TTL_SECONDS * 1000,
    ...(config.QUERY_TOKEN_SECRET !== undefined && { tokenSecret: config.QUERY_TOKEN_SECRET }),
  });
  await fastify.register(links);
  await fastify.register(bulk);
  await fastify.register(diff);
  await fastify.register(series);
  await fastify.register(cdc, { mappings: config.CDC_MAPPINGS });
  await fastify.register(actions);
  await fastify.register(merges);
  await fastify.register(positions, { intervalMs: config.POSITION_ANNOUNCE_MS });
  await fastify.register(live, {
    replayEvents: config.LIVE_REPLAY_EVENTS,
    replayBytes: config.LIVE_REPLAY_BYTES,
    replaySeconds: config.LIVE_REPLAY_SECONDS,
    bufferEvents: config.LIVE_BUFFER_EVENTS,
    heartbeatMs: config.LIVE_HEARTBEAT_MS,
    authCheckMs: config.LIVE_AUTH_CHECK_MS,
  });
  await fastify.register(webhooks, {
    retryHours: config.WEBHOOK_RETRY_HOURS,
    disableAfterHours: config.WEBHOOK_DISABLE_AFTER_HOURS,
    retryBaseMs: config.WEBHOOK_RETRY_BASE_MS,
    retryMaxMs: config.WEBHOOK_RETRY_MAX_MS,
    timeoutMs: config.WEBHOOK_TIMEOUT_MS,
    concurrency: config.WEBHOOK_CONCURRENCY,
    logRetentionHours: config.WEBHOOK_LOG_RETENTION_HOURS,
    allowHosts: config.ONTO_WEBHOOK_ALLOW_HOSTS,
  });
  await fastify.register(adminRoutes);
};

// Not encapsulated: the server (and tests) see what the service decorates the instance with.
export default fp(app, { name: 'onto-data' });
