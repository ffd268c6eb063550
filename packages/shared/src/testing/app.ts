import type { Static, TObject } from '@sinclair/typebox';
import Fastify, { type FastifyInstance, type FastifyPluginAsync } from 'fastify';
import { loadConfig } from '../config/load.js';
import type { MigrationTrack } from '../db/migrate.js';
import { fastifyOptions } from '../http/platform.js';
import { createTestDatabase } from './databases.js';
import { testEndpoints } from './env.js';
import { testIdentityEnv } from './identity-key.js';

export interface TestService<C> {
  app: FastifyInstance;
  config: C;
  env: Record<string, string>;
  databaseUrl: string;
  close(): Promise<void>;
}

/**
 * Builds a service the way server.ts does, without listening, on a database of its own and the
 * test endpoints; `env` overrides any variable (a wrong KAFKA_BROKERS, say).
 */
export async function buildTestService<S extends TObject>(
  service: { schema: S; app: FastifyPluginAsync<{ config: Static<S> }>; migrations: MigrationTrack[] },
  env: Record<string, string> = {},
): Promise<TestService<Static<S>>> {
  const endpoints = testEndpoints();
  const db = await createTestDatabase(endpoints.postgresUrl, service.migrations);
  const fullEnv = {
    DATABASE_URL: db.url,
    REDIS_URL: endpoints.redisUrl,
    KAFKA_BROKERS: endpoints.kafkaBrokers,
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
    ...testIdentityEnv(),
    // `{database}` in a value names the service's test database (a replica's URL, say).
    ...Object.fromEntries(
      Object.entries(env).map(([k, v]) => [k, v.replaceAll('{database}', new URL(db.url).pathname.slice(1))]),
    ),
  };
  const config = loadConfig(service.schema, fullEnv);
  const app = Fastify(fastifyOptions(config as { LOG_LEVEL: string }));
  try {
    await app.register(service.app, { config });
    await app.ready();
  } catch (error) {
    await app.close().catch(() => {});
    await db.drop();
    throw error;
  }
  return {
    app,
    config,
    env: fullEnv,
    databaseUrl: db.url,
    async close() {
      await app.close();
      await db.drop();
    },
  };
}
