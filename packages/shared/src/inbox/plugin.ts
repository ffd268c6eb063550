import type { Tracer } from '@opentelemetry/api';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { Gauge } from 'prom-client';
import { retryWithBackoff } from '../backoff.js';
import type { Admin } from '../kafka/broker.js';
import { dlqOf, physicalTopic } from '../kafka/topics.js';
import { withTimeout } from '../readiness.js';
import { InboxConsumer, type InboxConsumerOptions } from './consumer.js';
import { RecordConsumer, type RecordConsumerOptions } from './record-consumer.js';

export type ServiceConsumerOptions = Omit<
  InboxConsumerOptions,
  'broker' | 'pool' | 'redis' | 'logger' | 'registry' | 'topics'
> & {
  /** Logical topic names; the service's topic prefix is added. */
  topics: string[];
};

/** A consumer of records that are not onto's events (CDC): see RecordConsumer. */
export type ServiceRecordConsumerOptions = Omit<RecordConsumerOptions, 'broker' | 'logger' | 'topics'> & {
  /** Logical topic names; the service's topic prefix is added. */
  topics: string[];
};

/** How a consumer's start in the background fares: for diagnostics. */
export interface ConsumerStatus {
  running: boolean;
  startAttempts: number;
  lastStartError: string | null;
}

declare module 'fastify' {
  interface FastifyInstance {
    /** Registers an inbox consumer that runs while the service does. */
    addConsumer(options: ServiceConsumerOptions): InboxConsumer;
    /** Registers a consumer of records that are not onto's events, run the same way. */
    addConsumer(options: ServiceRecordConsumerOptions): RecordConsumer;
    /** How a consumer registered here fares. */
    consumerStatus(consumer: InboxConsumer | RecordConsumer): ConsumerStatus;
  }
}

export interface ConsumersPluginOptions {
  /** The inbox retention of every consumer that does not set its own (see InboxConsumerOptions). */
  retentionMs?: number;
  /** The service's tracer: a span per traced record applied (docs/adr/0055). */
  tracer?: Tracer;
}

/**
 * The service's inbox consumers: started once the app is ready — in the background, retrying
 * while Kafka is away, so that a service boots without it — and stopped on close.
 */
export const consumersPlugin = fp(
  async (app: FastifyInstance, opts: ConsumersPluginOptions) => {
    const consumers = new Map<InboxConsumer | RecordConsumer, ConsumerStatus>();
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
    function add(options: ServiceConsumerOptions | ServiceRecordConsumerOptions): InboxConsumer | RecordConsumer {
      // The prefix namespaces the group too, so that test runs or tenants sharing a broker
      // never join each other's groups.
      const name = `${app.topicPrefix}${options.name}`;
      const topics = options.topics.map((t) => physicalTopic(app.topicPrefix, t));
      const common = { name, topics, broker: app.broker, logger: app.log as never };
      const consumer =
        'handle' in options
          ? new RecordConsumer({ ...options, ...common })
          : new InboxConsumer({
              ...(opts.retentionMs === undefined ? {} : { retentionMs: opts.retentionMs }),
              ...options,
              ...common,
              pool: app.pg,
              redis: app.redis,
              registry: app.metrics,
              ...(opts.tracer ? { tracer: opts.tracer } : {}),
            });
      if (consumer instanceof InboxConsumer) {
        // Its inbox is pruned by one replica a period, on the job runner (docs/adr/0051).
        app.jobs.every(`kernel.inbox-prune: ${options.name}`, consumer.pruneIntervalMs, () => consumer.prune());
      }
      consumers.set(consumer, { running: false, startAttempts: 0, lastStartError: null });
      groups.push({ group: name, topics });
      return consumer;
    }
    app.decorate('addConsumer', add as FastifyInstance['addConsumer']);
    app.decorate('consumerStatus', (consumer: InboxConsumer | RecordConsumer): ConsumerStatus => {
      const status = consumers.get(consumer);
      if (!status) throw new Error('not a consumer of this service');
      return { ...status };
    });
    app.addHook('onReady', async () => {
      for (const [consumer, status] of consumers) {
        starting.push(
          retryWithBackoff(
            async (attempt) => {
              status.startAttempts = attempt + 1;
              await consumer.start();
              // A start that outlived the close's wait stops itself.
              if (closing) await consumer.stop();
              else status.running = true;
            },
            {
              initialMs: 500,
              maxMs: 10_000,
              stopped: () => closing,
              onRetry: async (err, attempt) => {
                status.lastStartError = err instanceof Error ? err.message : String(err);
                app.log.warn({ err, attempt }, 'consumer could not start; retrying');
                await consumer.stop().catch(() => {});
              },
            },
          ),
        );
      }
    });
    app.addHook('onClose', async () => {
      closing = true;
      // A start against an unreachable broker can hang for its whole connection timeout.
      await withTimeout(Promise.all(starting), 500, 'consumer start in progress').catch(() => {});
      await withTimeout(
        Promise.all([...consumers.keys()].map((c) => c.stop().catch(() => {}))),
        5000,
        'consumers did not stop in time',
      ).catch((err) => app.log.warn({ err }, 'closing without waiting for the consumers'));
      await admin?.then((a) => a.disconnect()).catch(() => {});
    });
  },
  { name: 'onto-consumers', dependencies: ['onto-postgres', 'onto-redis', 'onto-kafka', 'onto-metrics', 'onto-jobs'] },
);
