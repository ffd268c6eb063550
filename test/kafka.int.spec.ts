import { randomBytes } from 'node:crypto';
import type { IncomingMessage } from '@onto/shared';
import { testBroker, testEndpoints } from '@onto/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

describe('Kafka round trip through the local broker', () => {
  const { kafkaBrokers } = testEndpoints();
  const broker = testBroker(kafkaBrokers);
  const topic = `roundtrip.${randomBytes(4).toString('hex')}`;

  beforeAll(async () => {
    const admin = await broker.admin();
    await admin.ensureTopics([{ name: topic, partitions: 6 }]);
    await admin.disconnect();
  });
  afterAll(async () => {
    const admin = await broker.admin();
    await admin.deleteTopics([topic]);
    await admin.disconnect();
  });

  it('delivers every record, each key always to the same partition, in order', async () => {
    const keys = Array.from({ length: 12 }, (_, i) => `world-a/order/${i}`);
    const rounds = 10;
    const producer = await broker.producer();
    for (let round = 0; round < rounds; round++) {
      await producer.send([
        {
          topic,
          messages: keys.map((key) => ({
            key,
            value: JSON.stringify({ key, round }),
            headers: { round: String(round) },
          })),
        },
      ]);
    }
    await producer.disconnect();

    const received: IncomingMessage[] = [];
    const consumer = await broker.consumer({ groupId: `g-${topic}`, topics: [topic], fromBeginning: true });
    const done = new Promise<void>((resolve) => {
      void consumer.run(async (batch) => {
        received.push(...batch.messages);
        if (received.length >= keys.length * rounds) resolve();
      });
    });
    await done;
    await consumer.disconnect();

    expect(received).toHaveLength(keys.length * rounds);
    const partitionsUsed = new Set(received.map((m) => m.partition));
    expect(partitionsUsed.size).toBeGreaterThan(1); // twelve keys spread over six partitions
    for (const key of keys) {
      const mine = received.filter((m) => m.key === key);
      expect(new Set(mine.map((m) => m.partition)).size).toBe(1);
      expect(mine.map((m) => JSON.parse(m.value?.toString() ?? '{}').round)).toEqual([...Array(rounds).keys()]);
      expect(mine.map((m) => m.headers.round)).toEqual([...Array(rounds).keys()].map(String));
    }
  });
});
