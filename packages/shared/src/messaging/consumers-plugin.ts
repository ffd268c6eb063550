import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { Gauge } from 'prom-client';
import { retryWithBackoff } from '../backoff.js';
import { withTimeout } from '../http/health.js';
import type { Admin } from '../kafka/broker.js';
import { physicalTopic } from '../kafka/topics.js';
import { InboxConsumer, type InboxConsumerOptions } from './consumer.js';

export type ServiceConsumerOptions = Omit<
  InboxConsumerOptions,
  'broker' | 'pool' | 'redis' | 'logger' | 'registry' | 'topics'
> & {
  /** Logical topic names; the service's topic prefix is added. */
  topics: string[];
};

declare module 'fastify' {
  interface FastifyInstance {
    /** Registers an inbox consumer that runs while the service does. */
    addConsumer(options: ServiceConsumerOptions): InboxConsumer;
  }
}

export interface ConsumersPluginOptions {
  /** The inbox retention of every consumer that does not set its own (see InboxConsumerOptions). */
  retentionMs?: number;
}

/**
 * The service's inbox consumers: started once the app is ready — in the background, retrying
 * while Kafka is away, so that a service boots without it — and stopped on close.
 */
export const consumersPlugin = fp(
  async (app: FastifyInstance, opts: ConsumersPluginOptions) => {
    const consumers: InboxConsumer[] = [];
    const groups: { group: string; topics: string[] }[] = [];
    let closing = false;
    const starting: Promise<void>[] = [];
    let admin: Admin | undefined;
    new Gauge({
      name: 'onto_consumer_lag',
      help: 'Records not yet consumed, by consumer group and topic (end offsets minus committed)',
      labelNames: ['consumer', 'topic'] as const,
      registers: [app.metrics],
      async collect() {
        // Asked of the broker at scrape time, bounded: a scrape never hangs on Kafka.
        try {
          admin ??= await withTimeout(app.broker.admin(), 1000, 'kafka admin');
          for (const { group, topics } of groups) {
            for (const topic of topics) {
              this.set({ consumer: group, topic }, await withTimeout(admin.consumerLag(group, topic), 1000, 'lag'));
            }
          }
        } catch {
          admin = undefined; // reconnect at the next scrape; the last values stay
        }
      },
    });
    app.decorate('addConsumer', (options: ServiceConsumerOptions) => {
      const consumer = new InboxConsumer({
        ...(opts.retentionMs === undefined ? {} : { retentionMs: opts.retentionMs }),
        ...options,
        // The prefix namespaces the group too, so that test runs or tenants sharing a broker
        // never join each other's groups.
        name: `${app.topicPrefix}${options.name}`,
        topics: options.topics.map((t) => physicalTopic(app.topicPrefix, t)),
        broker: app.broker,
        pool: app.pg,
        redis: app.redis,
        logger: app.log as never,
        registry: app.metrics,
      });
      consumers.push(consumer);
      groups.push({
        group: `${app.topicPrefix}${options.name}`,
        topics: options.topics.map((t) => physicalTopic(app.topicPrefix, t)),
      });
      return consumer;
    });
    app.addHook('onReady', async () => {
      for (const consumer of consumers) {
        starting.push(
          retryWithBackoff(() => consumer.start(), {
            initialMs: 500,
            maxMs: 10_000,
            stopped: () => closing,
            onRetry: async (err, attempt) => {
              app.log.warn({ err, attempt }, 'consumer could not start; retrying');
              await consumer.stop().catch(() => {});
            },
          }),
        );
      }
    });
    app.addHook('onClose', async () => {
      closing = true;
      // A start against an unreachable broker can hang for its whole connection timeout.
      await withTimeout(Promise.all(starting), 500, 'consumer start in progress').catch(() => {});
      await withTimeout(
        Promise.all(consumers.map((c) => c.stop().catch(() => {}))),
        5000,
        'consumers did not stop in time',
      ).catch((err) => app.log.warn({ err }, 'closing without waiting for the consumers'));
      await admin?.disconnect().catch(() => {});
    });
  },
  { name: 'onto-consumers', dependencies: ['onto-postgres', 'onto-redis', 'onto-kafka', 'onto-metrics'] },
);
