import { randomBytes } from 'node:crypto';
import { pino } from 'pino';
import type { Broker } from '../kafka/broker.js';
import { createKafkaBroker } from '../kafka/kafkajs-broker.js';
import { platformTopics } from '../kafka/topics.js';

export const testLogger = pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' });

export function testBroker(brokers: string): Broker {
  return createKafkaBroker({ brokers: brokers.split(','), clientId: 'onto-test', logger: testLogger });
}

/**
 * A topic prefix of this test file's own, with the platform's topics created under it, so that
 * test files share one broker without reading each other's events.
 */
export async function createTestTopics(
  brokers: string,
  partitions = 3,
): Promise<{ prefix: string; drop: () => Promise<void> }> {
  const prefix = `t${randomBytes(4).toString('hex')}.`;
  const admin = await testBroker(brokers).admin();
  const specs = platformTopics(prefix, partitions);
  await admin.ensureTopics(specs);
  return {
    prefix,
    drop: async () => {
      await admin.deleteTopics(specs.map((s) => s.name)).catch(() => {});
      await admin.disconnect();
    },
  };
}
