import { randomBytes } from 'node:crypto';
import type { IncomingMessage } from '@onto/shared';
import { testBroker, testEndpoints } from '@onto/shared/testing';
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

describe('Kafka round trip through the local broker', () => {
  const { kafkaBrokers } = testEndpoints();
  const broker = testBroker(kafkaBrokers);
  const topic = `roundtrip.${randomBytes(4).toString('hex')}`;
  const created = [topic];

  beforeAll(async () => {
    const admin = await broker.admin();
    await admin.ensureTopics([{ name: topic, partitions: 6 }]);
    await admin.disconnect();
  });
  afterAll(async () => {
    const admin = await broker.admin();
    await admin.deleteTopics(created);
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

  /** A topic whose records each travel in a record batch of their own, so that a fetch of 200 bytes holds a few. */
  async function topicOfSmallBatches(partitions: number, perPartition: number) {
    const name = `batches.${randomBytes(4).toString('hex')}`;
    created.push(name);
    const admin = await broker.admin();
    await admin.ensureTopics([{ name, partitions }]);
    await admin.disconnect();
    // kafkajs itself: onto's producer picks a record's partition by its key, never by name.
    const producer = new Kafka({ brokers: kafkaBrokers.split(','), logLevel: logLevel.NOTHING }).producer();
    await producer.connect();
    for (let i = 0; i < perPartition; i++) {
      for (let p = 0; p < partitions; p++) {
        await producer.send({ topic: name, messages: [{ key: `k${p}`, value: String(i), partition: p }] });
      }
    }
    await producer.disconnect();
    return name;
  }

  /** The offset group `g-<topic>` committed on the topic's partition 0. */
  async function committedOffset(name: string) {
    const reader = await broker.consumer({ groupId: `g-${name}`, topics: [name] });
    try {
      return (await reader.committedOffsets(name)).get(0);
    } finally {
      await reader.disconnect();
    }
  }

  it('hands a partition its batches one at a time and in order; a failed batch comes again from its first uncommitted record', async () => {
    const name = await topicOfSmallBatches(1, 40);
    const consumer = await broker.consumer({
      groupId: `g-${name}`,
      topics: [name],
      maxBytesPerPartition: 200,
      maxWaitTimeMs: 50,
    });
    const handled: number[][] = [];
    let active = 0;
    let mostActive = 0;
    let failedFrom: number | undefined;
    const all = new Promise<void>((resolve) => {
      void consumer.run(async (batch) => {
        active++;
        mostActive = Math.max(mostActive, active);
        try {
          // Handling takes time, which is what is tested: the next batch is fetched meanwhile.
          await new Promise((r) => setTimeout(r, 20));
          const offsets = batch.messages.map((m) => Number(m.offset));
          handled.push(offsets);
          if (failedFrom === undefined && offsets.length >= 2 && (offsets[0] as number) >= 5) {
            failedFrom = (offsets[0] as number) + 1;
            await batch.commit(batch.messages[0] as IncomingMessage); // its first record done, then a fault
            throw new Error('injected: the handler fails after its first record');
          }
          if (offsets.includes(39)) resolve();
        } finally {
          active--;
        }
      });
    });
    await all;
    await consumer.disconnect();

    expect(failedFrom).toBeDefined();
    expect(mostActive).toBe(1);
    expect(handled.length).toBeGreaterThan(3); // small fetches: several batches
    const failedAt = handled.findIndex((offsets) => offsets.includes(failedFrom as number));
    // Nothing after the failed batch was handled before it came again, from its first uncommitted record.
    expect(handled[failedAt + 1]?.[0]).toBe(failedFrom);
    const done = handled.flatMap((offsets, i) => (i === failedAt ? offsets.slice(0, 1) : offsets));
    expect(done).toEqual([...Array(40).keys()]);
    expect(await committedOffset(name)).toBe('40');
  });

  it('handles at most partitionsConsumedConcurrently batches at once, over all partitions', async () => {
    const name = await topicOfSmallBatches(6, 5);
    const consumer = await broker.consumer({
      groupId: `g-${name}`,
      topics: [name],
      maxBytesPerPartition: 200,
      maxWaitTimeMs: 50,
      partitionsConsumedConcurrently: 2,
    });
    let active = 0;
    let mostActive = 0;
    let seen = 0;
    const all = new Promise<void>((resolve) => {
      void consumer.run(async (batch) => {
        active++;
        mostActive = Math.max(mostActive, active);
        // Handling takes time, which is what is tested: the other partitions' batches queue meanwhile.
        await new Promise((r) => setTimeout(r, 30));
        active--;
        seen += batch.messages.length;
        if (seen >= 30) resolve();
      });
    });
    await all;
    await consumer.disconnect();
    expect(mostActive).toBe(2);
  });

  it('on stop, lets the batch in hand finish and commits it before leaving the group', async () => {
    const name = await topicOfSmallBatches(1, 3);
    const consumer = await broker.consumer({ groupId: `g-${name}`, topics: [name], maxWaitTimeMs: 50 });
    let finished = 0;
    const started = new Promise<void>((resolve) => {
      void consumer.run(async (batch) => {
        resolve();
        // Handling takes time, which is what is tested: the batch is still in hand when stop() is called.
        await new Promise((r) => setTimeout(r, 300));
        finished += batch.messages.length;
      });
    });
    await started;
    await consumer.disconnect();
    expect(finished).toBeGreaterThan(0);
    expect(Number(await committedOffset(name))).toBe(finished);
  });
});
