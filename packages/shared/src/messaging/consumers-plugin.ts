import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { Gauge } from 'prom-client';
import { withTimeout } from '../http/health.js';
import type { Admin } from '../kafka/broker.js';
import { dlqOf, physicalTopic } from '../kafka/topics.js';
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
    // One admin for both gauges, whose collects prom-client runs concurrently.
    let admin: Promise<Admin> | undefined;
    const kafkaAdmin = () => {
      admin ??= withTimeout(app.broker.admin(), 1000, 'kafka admin');
      return admin;
    };
    new Gauge({
      name: 'onto_consumer_lag',
      help: 'Records not yet consumed, by consumer group and topic (end offsets minus committed)',
      labelNames: ['consumer', 'topic'] as const,
      registers: [app.metrics],
      async collect() {
        // Asked of the broker at scrape time, bounded: a scrape never hangs on Kafka.
        try {
          const kafka = await kafkaAdmin();
          for (const { group, topics } of groups) {
            for (const topic of topics) {
              this.set({ consumer: group, topic }, await withTimeout(kafka.consumerLag(group, topic), 1000, 'lag'));
            }
          }
        } catch {
          admin = undefined; // reconnect at the next scrape; the last values stay
        }
      },
    });
    new Gauge({
      name: 'onto_dlq_depth',
      help: 'Records held in a dead-letter topic (end offsets minus earliest; a redrive deletes what it re-published)',
      labelNames: ['topic'] as const,
      registers: [app.metrics],
      async collect() {
        const kafka = await kafkaAdmin().catch(() => undefined);
        if (!kafka) return; // the lag gauge drops the failed admin; the last values stay
        for (const topic of new Set(groups.flatMap((g) => g.topics.map(dlqOf)))) {
          try {
            const offsets = await withTimeout(kafka.partitionOffsets(topic), 1000, 'dlq offsets');
            this.set(
              { topic },
              offsets.reduce((sum, p) => sum + Number(BigInt(p.high) - BigInt(p.low)), 0),
            );
          } catch {
            // a DLQ topic not created yet, or a slow broker: no value this scrape
          }
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
          (async () => {
            for (let attempt = 0; !closing; attempt++) {
              try {
                await consumer.start();
                return;
              } catch (err) {
                app.log.warn({ err, attempt }, 'consumer could not start; retrying');
                await consumer.stop().catch(() => {});
                await new Promise((r) => setTimeout(r, Math.min(500 * 2 ** attempt, 10_000)));
              }
            }
          })(),
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
      await admin?.then((a) => a.disconnect()).catch(() => {});
    });
  },
  { name: 'onto-consumers', dependencies: ['onto-postgres', 'onto-redis', 'onto-kafka', 'onto-metrics'] },
);
