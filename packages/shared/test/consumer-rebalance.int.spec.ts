import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeEvent } from '../src/events/envelope.js';
import { InboxConsumer } from '../src/inbox/consumer.js';
import type { Producer } from '../src/kafka/broker.js';
import { dlqOf } from '../src/kafka/topics.js';
import { consumedPastSentinel, eventually, testBroker, testLogger } from '../src/testing/index.js';
import { effectCounts, kernelFixture, orderEvent, recordEffects, sentinelsBehind } from './kernel.js';

/**
 * Two instances of one consumer group (issue 18, item 6): partitions move between them
 * while batches are being applied, so that records another instance applied but had not yet
 * committed the offsets of arrive again at the new owner. The inbox makes them no-ops.
 */
describe('inbox consumers of one group through rebalances', () => {
  let fx: Awaited<ReturnType<typeof kernelFixture>>;
  let producer: Producer;

  beforeAll(async () => {
    fx = await kernelFixture();
    producer = await testBroker(fx.endpoints.kafkaBrokers).producer();
  });
  afterAll(async () => {
    await producer?.disconnect();
    await fx?.close();
  });

  it('a member joining and one leaving while batches are in flight apply nothing twice', {
    timeout: 120_000,
  }, async () => {
    const topic = fx.topic('rebalance');
    const admin = await testBroker(fx.endpoints.kafkaBrokers).admin();
    await admin.ensureTopics([
      { name: topic, partitions: 6 },
      { name: dlqOf(topic), partitions: 6 },
    ]);
    await admin.disconnect();
    const messages = Array.from({ length: 2400 }, (_, i) => orderEvent(`r-${i % 60}`, Math.floor(i / 60) + 1));
    // Twenty at a time: many small record batches, so that a fetch never holds a partition's all.
    for (let i = 0; i < messages.length; i += 20) {
      await producer.send([
        { topic, messages: messages.slice(i, i + 20).map((m) => ({ key: m.key, value: encodeEvent(m.event) })) },
      ]);
    }

    const group = `c-${topic}`;
    const applied = new Map<string, number>();
    const instance = (name: string) =>
      new InboxConsumer({
        name: group,
        topics: [topic],
        broker: testBroker(fx.endpoints.kafkaBrokers),
        pool: fx.pool,
        logger: testLogger,
        maxBytesPerPartition: 4096, // batches of about ten events
        partitionsConsumedConcurrently: 3,
        sessionTimeoutMs: 6000,
        rebalanceTimeoutMs: 10_000,
        faults: {
          // Slow between the effects' commit and the offsets' commit: a partition moved meanwhile
          // is fetched by its new owner from before what this instance applied.
          afterCommit: () => new Promise((resolve) => setTimeout(resolve, 20)),
        },
        apply: async (tx, events) => {
          await recordEffects(tx, events);
          // Keeps each batch's transaction open while the group rebalances.
          await tx.query('SELECT pg_sleep(0.05)');
          applied.set(name, (applied.get(name) ?? 0) + events.length);
        },
      });
    const total = async () => [...(await effectCounts(fx.pool)).values()].reduce((a, b) => a + b, 0);

    const first = instance('first');
    const second = instance('second');
    const running = [first];
    try {
      await first.start();
      await eventually('the first instance applying', async () => (applied.get('first') ?? 0) >= 60, {
        timeoutMs: 30_000,
      });
      await second.start(); // joins: the first's partitions are split while it applies
      running.push(second);
      await eventually('the second instance applying', async () => (applied.get('second') ?? 0) >= 30, {
        timeoutMs: 30_000,
      });
      expect(await total()).toBeLessThan(messages.length); // the rebalances came with work left
      await first.stop(); // leaves: its partitions move to the others, mid-stream
      running.splice(running.indexOf(first), 1);

      await eventually('every effect', async () => (await effectCounts(fx.pool)).size >= messages.length, {
        timeoutMs: 60_000,
      });
      await consumedPastSentinel(testBroker(fx.endpoints.kafkaBrokers), producer, {
        groupId: group,
        topic,
        sentinels: sentinelsBehind(messages),
      });
      const counts = await effectCounts(fx.pool);
      const twice = messages.filter((m) => counts.get(m.event.event_id) !== 1);
      expect(twice.map((m) => `${m.key} v${m.event.version}: ${counts.get(m.event.event_id)}`)).toEqual([]);
    } finally {
      await Promise.all(running.map((c) => c.stop()));
    }
  });
});
