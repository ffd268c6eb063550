import { randomUUID } from 'node:crypto';
import { Kafka, KafkaJSNonRetriableError } from 'kafkajs';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import type { Consumer } from '../src/kafka/broker.js';
import { eventually, testBroker, testEndpoints } from '../src/testing/index.js';

/**
 * Issue 31 (ADR 79): kafkajs starts a crashed consumer again only after a retriable crash. A
 * consumer that met a non-retriable error (GroupCoordinatorNotFound while a restarted broker
 * elects its coordinator) left its group for good while the service ran on: in the chaos run,
 * data-webhooks stopped queueing deliveries after a broker fault. The broker's consumer starts
 * such a consumer again. The crash is made here by kafkajs's own path: its first batch handler
 * throws a non-retriable error, which kafkajs answers with a crash it does not restart.
 */
describe('a consumer that kafkajs does not restart after a crash', () => {
  const brokers = testEndpoints().kafkaBrokers;
  const broker = testBroker(brokers);
  const topic = `revival-${randomUUID()}`;
  let consumer: Consumer | undefined;

  afterEach(async () => {
    vi.restoreAllMocks();
    await consumer?.disconnect();
  });
  afterAll(async () => {
    const admin = new Kafka({ brokers: brokers.split(','), logLevel: 0 }).admin();
    await admin.connect();
    await admin.deleteTopics({ topics: [topic] }).catch(() => {});
    await admin.disconnect();
  });

  it('is started again and consumes what was sent before and after the crash', { timeout: 60_000 }, async () => {
    const admin = await broker.admin();
    await admin.ensureTopics([{ name: topic, partitions: 1 }]);
    await admin.disconnect();
    const crashes: boolean[] = [];
    const consumerOf = Kafka.prototype.consumer;
    vi.spyOn(Kafka.prototype, 'consumer').mockImplementation(function (this: Kafka, config) {
      const made = consumerOf.call(this, config);
      made.on(made.events.CRASH, ({ payload }) => crashes.push(payload.restart));
      const run = made.run.bind(made);
      let first = true;
      made.run = (runConfig) =>
        run({
          ...runConfig,
          eachBatch: async (payload) => {
            if (first) {
              first = false;
              throw new KafkaJSNonRetriableError('a crash kafkajs does not restart');
            }
            return runConfig?.eachBatch?.(payload);
          },
        });
      return made;
    });

    const seen: string[] = [];
    consumer = await broker.consumer({ groupId: `revival-${randomUUID()}`, topics: [topic] });
    await consumer.run(async (batch) => {
      for (const m of batch.messages) seen.push(String(m.value));
    });
    const producer = await broker.producer();
    try {
      await producer.send([{ topic, messages: [{ key: 'k', value: 'before' }] }]);
      await eventually('the crash', () => crashes.length > 0, { timeoutMs: 20_000 });
      expect(crashes[0]).toBe(false); // kafkajs gave up on it
      await producer.send([{ topic, messages: [{ key: 'k', value: 'after' }] }]);
      await eventually('both records consumed', () => seen.includes('before') && seen.includes('after'), {
        timeoutMs: 30_000,
      });
    } finally {
      await producer.disconnect();
    }
  });
});
