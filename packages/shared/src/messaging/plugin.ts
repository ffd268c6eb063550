import type { Tracer } from '@opentelemetry/api';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { everyInProcess, type InProcessTask } from '../in-process.js';
import { inboxReleaseRoute } from '../inbox/release.js';
import type { Admin, Producer } from '../kafka/broker.js';
import { physicalTopic, TOPIC_NAMES } from '../kafka/topics.js';
import { learnRecordLimits } from '../outbox/record-limits.js';
import { OutboxRelay } from '../outbox/relay.js';
import { outboxSetAsideRoutes } from '../outbox/set-aside-routes.js';
import { withTimeout } from '../readiness.js';

declare module 'fastify' {
  interface FastifyInstance {
    relay: OutboxRelay;
    /** Asks the broker for its topics' record limits again (they are asked at start and every few minutes). */
    learnRecordLimits(): Promise<Map<string, number>>;
  }
}

export interface OutboxPluginOptions {
  batchSize?: number;
  pollIntervalMs?: number;
  retentionMs?: number;
  /** How often the topics' `max.message.bytes` is asked again. */
  recordLimitsRefreshMs?: number;
  /** The service's tracer: a span per traced row sent (docs/adr/0055). */
  tracer?: Tracer;
}

/**
 * Runs the service's outbox relay beside its HTTP server. It starts once the app is ready and
 * keeps retrying the broker in the background, so a service boots (and says so in /ready) while
 * Kafka is away; rows wait in the outbox meanwhile.
 */
export const outboxPlugin = fp(
  async (app: FastifyInstance, { recordLimitsRefreshMs, ...opts }: OutboxPluginOptions) => {
    let stopped = false;
    // A producer per relay loop, made when first used: two loops never share an idempotent
    // producer's sequence numbers (docs/adr/0063).
    const lazy = (): Producer => {
      let made: Producer | undefined;
      let making: Promise<Producer> | undefined;
      return {
        async send(batches) {
          making ??= app.broker.producer().then(
            (p) => {
              made = p;
              return p;
            },
            (error) => {
              making = undefined;
              throw error;
            },
          );
          return (await making).send(batches);
        },
        // Closes the producer made; one still being made (a broker that does not answer) is not
        // waited for: shutting down must not hang on the broker.
        async disconnect() {
          const producer = made;
          made = undefined;
          making = undefined;
          await producer?.disconnect();
        },
      };
    };
    // As many as the relay's loops (two: OutboxRelay's default).
    const producers = Array.from({ length: 2 }, lazy);
    const relay = new OutboxRelay({
      pool: app.pg,
      producer: producers,
      concurrency: producers.length,
      logger: app.log.child({ component: 'outbox-relay' }) as never,
      registry: app.metrics,
      ...opts,
    });
    app.decorate('relay', relay);
    // Sent rows past the retention go, one replica a period (docs/adr/0051).
    app.jobs.every('kernel.outbox-prune', relay.pruneIntervalMs, () => relay.prune());

    // What the broker accepts, read at start so that writes are refused at once (413) rather than
    // set aside by the relay; until the broker answers, Kafka's default limit holds.
    let admin: Admin | undefined;
    const topics = TOPIC_NAMES.map((t) => physicalTopic(app.topicPrefix, t));
    const learn = async () => {
      try {
        admin ??= await app.broker.admin();
        return await learnRecordLimits(admin, topics);
      } catch (error) {
        const stale = admin;
        admin = undefined;
        await stale?.disconnect().catch(() => {});
        throw error;
      }
    };
    app.decorate('learnRecordLimits', learn);
    let refresh: InProcessTask | undefined;
    app.addHook('onReady', async () => {
      if (stopped) return;
      await withTimeout(learn(), 3000, 'the broker did not say its record limits').catch((err) =>
        app.log.warn({ err }, "record limits not known: Kafka's default limit holds until the broker answers"),
      );
      // Each instance keeps its own copy of the limits in memory: a per-process timer, not a job.
      refresh = everyInProcess('refreshing record limits', recordLimitsRefreshMs ?? 300_000, learn, app.log);
      await relay.start();
    });
    app.addHook('onClose', async () => {
      stopped = true;
      refresh?.stop();
      await relay.stop();
      await Promise.all(producers.map((p) => p.disconnect().catch(() => {})));
      await admin?.disconnect().catch(() => {});
    });
  },
  { name: 'onto-outbox', dependencies: ['onto-postgres', 'onto-kafka', 'onto-metrics', 'onto-jobs'] },
);

/**
 * The kernel's own admin routes, the same in every service: `POST /v1/admin/inbox/release` and
 * the outbox's set-aside list and redrive. authPlugin registers them once it can authorise them,
 * in a service that has the kernel's database and Redis (platformPlugin); no service does.
 */
export async function kernelAdminRoutes(fastify: FastifyInstance): Promise<void> {
  await inboxReleaseRoute(fastify);
  await outboxSetAsideRoutes(fastify);
}
