import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { kernelMigrations, type MigrationTrack, platformPlugin } from '@onto/shared';
import type { FastifyPluginAsync } from 'fastify';
import fp from 'fastify-plugin';
import adminRoutes from './admin/routes.js';
import audit from './audit/plugin.js';
import checker from './checker/plugin.js';
import type { Config } from './config.js';
import consoleFiles from './console/plugin.js';
import identity from './identity/plugin.js';
import merges from './merges/plugin.js';
import { PropertyTypeSchema } from './schema/bodies.js';
import schemaRoutes from './schema/routes.js';
import worldConsistency from './worlds/consistency.js';
import worldProtection from './worlds/protection.js';
import worldRetention from './worlds/retention.js';
import worldRoutes from './worlds/routes.js';
import worldSaga from './worlds/saga.js';
import worldTags from './worlds/tags.js';

const { version } = createRequire(import.meta.url)('../package.json') as { version: string };

export const migrations: MigrationTrack[] = [
  kernelMigrations,
  { directory: fileURLToPath(new URL('../migrations', import.meta.url)), table: 'control_migrations' },
];

/** The control service: ontology schema, worlds and their lifecycle, identity and permissions. */
const app: FastifyPluginAsync<{ config: Config }> = async (fastify, { config }) => {
  await fastify.register(platformPlugin, {
    service: 'control',
    schemas: [PropertyTypeSchema],
    version,
    description: 'onto control: ontology schema, worlds and their lifecycle, identity and permissions',
    config,
    migrations,
  });
  await fastify.register(identity, { config });
  await fastify.register(schemaRoutes, {
    maxObjectTypes: config.MAX_OBJECT_TYPES_PER_WORLD,
    maxIndexedProperties: config.MAX_INDEXED_PROPERTIES_PER_WORLD,
  });
  const retention = {
    minDays: config.RETENTION_MIN_DAYS,
    keepDays: config.RETENTION_DEFAULT_KEEP_DAYS,
    keepVersions: config.RETENTION_DEFAULT_KEEP_VERSIONS,
  };
  await fastify.register(worldRoutes, { provisionTimeoutMs: config.WORLD_PROVISION_TIMEOUT_MS, retention });
  await fastify.register(worldTags);
  await fastify.register(worldProtection);
  await fastify.register(worldRetention, retention);
  await fastify.register(worldSaga);
  await fastify.register(worldConsistency, { keepSeconds: config.CONSISTENCY_HISTORY_KEEP_SECONDS });
  await fastify.register(merges, { timeoutMs: config.MERGE_TIMEOUT_MS });
  await fastify.register(adminRoutes);
  await fastify.register(audit);
  await fastify.register(consoleFiles, {
    dir: config.ONTO_CONSOLE_DIR,
    dataUrl: config.ONTO_DATA_URL,
    intelligenceUrl: config.ONTO_INTELLIGENCE_URL,
  });
  await fastify.register(checker, {
    intervalMs: config.CHECKER_INTERVAL_MS,
    reportTimeoutMs: config.CHECKER_REPORT_TIMEOUT_MS,
    countTolerance: config.CHECKER_COUNT_TOLERANCE,
    outboxMaxAgeSeconds: config.CHECKER_OUTBOX_MAX_AGE_SECONDS,
  });
};

// Not encapsulated: the server (and tests) see what the service decorates the instance with.
export default fp(app, { name: 'onto-control' });
