import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { Producer } from '../kafka/broker.js';
import { OutboxRelay } from './relay.js';

declare module 'fastify' {
  interface FastifyInstance {
    relay: OutboxRelay;
  }
}

export interface OutboxPluginOptions {
  batchSize?: number;
  pollIntervalMs?: number;
  retentionMs?: number;
}

/**
 * Runs the service's outbox relay beside its HTTP server. It starts once the app is ready and
 * keeps retrying the broker in the background, so a service boots (and says so in /ready) while
 * Kafka is away; rows wait in the outbox meanwhile.
 */
export const outboxPlugin = fp(
  async (app: FastifyInstance, opts: OutboxPluginOptions) => {
    let producer: Producer | undefined;
    let stopped = false;
    const lazy: Producer = {
      async send(batches) {
        producer ??= await app.broker.producer();
        return producer.send(batches);
      },
      async disconnect() {
        await producer?.disconnect();
      },
    };
    const relay = new OutboxRelay({
      pool: app.pg,
      producer: lazy,
      logger: app.log.child({ component: 'outbox-relay' }) as never,
      registry: app.metrics,
      ...opts,
    });
    app.decorate('relay', relay);
    app.addHook('onReady', async () => {
      if (!stopped) await relay.start();
    });
    app.addHook('onClose', async () => {
      stopped = true;
      await relay.stop();
      await lazy.disconnect().catch(() => {});
    });
  },
  { name: 'onto-outbox', dependencies: ['onto-postgres', 'onto-kafka', 'onto-metrics'] },
);
