import type { Static, TObject } from '@sinclair/typebox';
import closeWithGrace from 'close-with-grace';
import Fastify, { type FastifyPluginAsync } from 'fastify';
import { ConfigError, loadConfig } from '../config/load.js';
import { startTracing } from '../tracing/sdk.js';
import { fastifyOptions } from './platform.js';

interface ListenConfig {
  HOST: string;
  PORT: number;
  LOG_LEVEL: string;
  SHUTDOWN_TIMEOUT_MS: number;
  ONTO_TRACES_FILE?: string | undefined;
}

/**
 * Boots a service: validates its configuration (exit 1 naming the variable when it is wrong),
 * registers the app plugin, listens, and on SIGTERM/SIGINT lets in-flight requests finish,
 * closes pools and clients, and exits forcefully once SHUTDOWN_TIMEOUT_MS has passed.
 */
export async function runService<S extends TObject>(
  schema: S,
  app: FastifyPluginAsync<{ config: Static<S> & ListenConfig }>,
  env: NodeJS.ProcessEnv = process.env,
  service?: string,
): Promise<void> {
  let config: Static<S> & ListenConfig;
  try {
    config = loadConfig(schema, env) as Static<S> & ListenConfig;
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    process.stderr.write(`${error.message}\n`);
    process.exit(1);
  }
  // Before the app: its plugins and routes add spans only when tracing is on (docs/adr/0055).
  const stopTracing = service ? await startTracing({ service, env, file: config.ONTO_TRACES_FILE }) : undefined;
  const fastify = Fastify(fastifyOptions(config));
  closeWithGrace({ delay: config.SHUTDOWN_TIMEOUT_MS, logger: fastify.log }, async ({ signal, err }) => {
    if (err) fastify.log.error({ err }, 'shutting down after an unhandled error');
    else fastify.log.info({ signal }, 'shutting down');
    await fastify.close();
    await stopTracing?.().catch((error) => fastify.log.warn({ err: error }, 'spans not flushed'));
  });
  try {
    await fastify.register(app, { config });
    await fastify.listen({ host: config.HOST, port: config.PORT });
  } catch (error) {
    fastify.log.fatal({ err: error }, 'failed to start');
    await fastify.close().catch(() => {});
    process.exit(1);
  }
}
