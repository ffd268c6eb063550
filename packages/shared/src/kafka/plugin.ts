import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { Admin, Broker } from './broker.js';
import { createKafkaBroker, type KafkaSasl } from './kafkajs-broker.js';

declare module 'fastify' {
  interface FastifyInstance {
    broker: Broker;
    topicPrefix: string;
  }
}

export interface KafkaPluginOptions {
  brokers: string[];
  clientId: string;
  topicPrefix: string;
  sasl?: KafkaSasl | undefined;
}

/** The broker for this service; connections are made by the components that need them. */
export const kafkaPlugin = fp(
  async (app: FastifyInstance, opts: KafkaPluginOptions) => {
    const broker = createKafkaBroker({
      brokers: opts.brokers,
      clientId: opts.clientId,
      logger: app.log as never,
      sasl: opts.sasl,
    });
    app.decorate('broker', broker);
    app.decorate('topicPrefix', opts.topicPrefix);

    // Readiness has its own client that gives up at once, so a wrong address answers quickly.
    const probe = createKafkaBroker({
      brokers: opts.brokers,
      clientId: `${opts.clientId}-ready`,
      logger: app.log as never,
      sasl: opts.sasl,
      retries: 0,
      connectionTimeoutMs: 1500,
      requestTimeoutMs: 1500,
    });
    let admin: Admin | undefined;
    app.addReadinessCheck(
      'kafka',
      async () => {
        try {
          admin ??= await probe.admin();
          await admin.ping();
        } catch (error) {
          const stale = admin;
          admin = undefined;
          await stale?.disconnect().catch(() => {});
          throw new Error(`kafka at ${opts.brokers.join(',')} unreachable: ${(error as Error).message}`);
        }
      },
      // Writes go on into the outbox and consumers resume where they committed (ADR 22).
      { required: false },
    );
    app.addHook('onClose', async () => {
      await admin?.disconnect().catch(() => {});
    });
  },
  { name: 'onto-kafka', dependencies: ['onto-health'] },
);
