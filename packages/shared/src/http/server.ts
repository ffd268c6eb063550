import { createServer, type Server } from 'node:http';
import type { Static, TObject } from '@sinclair/typebox';
import closeWithGrace from 'close-with-grace';
import Fastify, { type FastifyInstance, type FastifyPluginAsync } from 'fastify';
import { backoffDelay, equalJitter } from '../backoff.js';
import { ConfigError, loadConfig } from '../config/load.js';
import { isInfrastructureError } from '../infrastructure-errors.js';
import { startTracing } from '../tracing/sdk.js';
import { fastifyOptions } from './platform.js';

interface ListenConfig {
  HOST: string;
  PORT: number;
  LOG_LEVEL: string;
  SHUTDOWN_TIMEOUT_MS: number;
  ONTO_TRACES_FILE?: string | undefined;
}

/** How long the boot waits between attempts while a dependency is unreachable. */
const BOOT_BACKOFF = { initialMs: 250, maxMs: 5000 };

/**
 * Boots a service: validates its configuration (exit 1 naming the variable when it is wrong),
 * registers the app plugin, listens, and on SIGTERM/SIGINT lets in-flight requests finish,
 * closes pools and clients, and exits forcefully once SHUTDOWN_TIMEOUT_MS has passed.
 *
 * A dependency unreachable at start-up (PostgreSQL refusing connections, restarting, a pool
 * timing out) does not end the process: it holds its port, answers /health alive and /ready 503
 * naming the failure, and boots again with backoff until the dependency answers (issue 33; a
 * supervisor or an orchestrator need not restart it). Any other failure (a migration refused, the
 * port taken) exits 1 as before.
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
  let fastify: FastifyInstance = Fastify(fastifyOptions(config));
  let waiting: StartupServer | undefined;
  let stopping = false;
  let wake: (() => void) | undefined;
  closeWithGrace({ delay: config.SHUTDOWN_TIMEOUT_MS, logger: fastify.log }, async ({ signal, err }) => {
    stopping = true;
    wake?.();
    if (err) fastify.log.error({ err }, 'shutting down after an unhandled error');
    else fastify.log.info({ signal }, 'shutting down');
    await waiting?.close();
    await fastify.close();
    await stopTracing?.().catch((error) => fastify.log.warn({ err: error }, 'spans not flushed'));
  });
  for (let attempt = 0; ; attempt++) {
    try {
      await fastify.register(app, { config });
      await fastify.ready();
      if (stopping) return;
      await waiting?.close();
      waiting = undefined;
      await fastify.listen({ host: config.HOST, port: config.PORT });
      return;
    } catch (error) {
      await fastify.close().catch(() => {});
      if (stopping) return;
      if (!unreachableAtStart(error)) {
        fastify.log.fatal({ err: error }, 'failed to start');
        await waiting?.close();
        process.exit(1);
      }
      const delayMs = equalJitter(backoffDelay(attempt, BOOT_BACKOFF));
      const reason = `a dependency is unreachable at start-up: ${(error as Error).message}`;
      fastify.log.warn({ err: error, attempt, retryInMs: Math.round(delayMs) }, `${reason}; starting again`);
      try {
        waiting ??= await StartupServer.listen(config.HOST, config.PORT);
      } catch (listenError) {
        fastify.log.fatal({ err: listenError }, 'failed to start');
        process.exit(1);
      }
      waiting.reason = reason;
      await new Promise<void>((resolve) => {
        wake = resolve;
        setTimeout(resolve, delayMs).unref();
      });
      wake = undefined;
      if (stopping) return;
      fastify = Fastify(fastifyOptions(config));
    }
  }
}

/**
 * A failure of a dependency rather than of the service: an infrastructure error anywhere in the
 * cause chain, or a plugin that timed out waiting for one (Fastify gives each plugin 10 s).
 */
function unreachableAtStart(error: unknown): boolean {
  for (let e = error as { code?: unknown; cause?: unknown } | undefined, depth = 0; e && depth < 5; depth++) {
    if (isInfrastructureError(e)) return true;
    if (e.code === 'AVV_ERR_PLUGIN_EXEC_TIMEOUT' || e.code === 'FST_ERR_PLUGIN_TIMEOUT') return true;
    e = e.cause as typeof e;
  }
  return false;
}

/**
 * What answers on the service's port while it cannot boot: /health alive (the process is not
 * stuck), /ready 503 in the shape of the service's own /ready, anything else 503 problem+json
 * with Retry-After. Every answer closes its connection, so that the service's own server takes the
 * port over at once.
 */
class StartupServer {
  reason = 'starting';

  private constructor(private readonly server: Server) {}

  static async listen(host: string, port: number): Promise<StartupServer> {
    let self: StartupServer | undefined;
    const server = createServer((request, response) => {
      const path = (request.url ?? '/').split('?')[0];
      const reason = self?.reason ?? 'starting';
      const [status, type, body] =
        path === '/health'
          ? [200, 'application/json', { status: 'alive' }]
          : path === '/ready'
            ? [
                503,
                'application/json',
                { status: 'unavailable', checks: { startup: { status: 'down', error: reason } } },
              ]
            : [
                503,
                'application/problem+json',
                {
                  type: 'https://onto.dev/problems/unavailable',
                  title: 'Service Unavailable',
                  status: 503,
                  detail: `the service is starting: ${reason}`,
                  instance: path,
                },
              ];
      response.writeHead(status, { 'content-type': type, connection: 'close', 'retry-after': '1' });
      response.end(JSON.stringify(body));
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => {
        server.off('error', reject);
        resolve();
      });
    });
    self = new StartupServer(server);
    return self;
  }

  async close(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.server.closeAllConnections();
    await closed;
  }
}
