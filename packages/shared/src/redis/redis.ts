import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { Redis } from 'ioredis';
import { backoffDelay } from '../backoff.js';
import { withTimeout } from '../readiness.js';

declare module 'fastify' {
  interface FastifyInstance {
    redis: Redis;
  }
}

/**
 * A Redis client that fails fast instead of queueing while Redis is away: Redis is only ever
 * a fast path here, and callers fall back to PostgreSQL rather than wait.
 */
export function createRedis(url: string, onError: (err: Error) => void): Redis {
  const redis = new Redis(url, {
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    connectTimeout: 2000,
    retryStrategy: (attempt) => backoffDelay(attempt, { initialMs: 100, maxMs: 2000 }),
  });
  redis.on('error', onError);
  return redis;
}

export const redisPlugin = fp(
  async (app: FastifyInstance, opts: { url: string }) => {
    let lastLogged = 0;
    const redis = createRedis(opts.url, (err) => {
      // ioredis emits an error per reconnect attempt; one line every 10 s is enough.
      if (Date.now() - lastLogged > 10_000) {
        lastLogged = Date.now();
        app.log.warn({ err }, 'redis unavailable');
      }
    });
    // Give Redis a moment at boot, but boot without it: /ready says it is down (degraded, not
    // unready), and the consumers fall back to PostgreSQL until it returns.
    await withTimeout(redis.connect(), 2000, 'redis did not connect within 2 s').catch((err: Error) =>
      app.log.warn({ err }, 'starting without redis'),
    );
    app.decorate('redis', redis);
    app.addReadinessCheck(
      'redis',
      async () => {
        if (redis.status !== 'ready') throw new Error(`redis is ${redis.status}`);
        await redis.ping();
      },
      { required: false }, // only a fast path: the inbox in PostgreSQL decides
    );
    app.addHook('onClose', async () => {
      redis.disconnect();
    });
  },
  { name: 'onto-redis', dependencies: ['onto-health'] },
);
