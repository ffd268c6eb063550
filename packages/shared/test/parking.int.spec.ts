import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeEvent } from '../src/events/envelope.js';
import { InboxConsumer, type InboxConsumerOptions } from '../src/inbox/consumer.js';
import type { Producer } from '../src/kafka/broker.js';
import { dlqOf } from '../src/kafka/topics.js';
import { eventually, testBroker, testLogger } from '../src/testing/index.js';
import { effectCounts, kernelFixture, orderEvent, recordEffects } from './kernel.js';

type Message = ReturnType<typeof orderEvent>;

/** ADR 22: a parked event waits on the consumer's progress, and contention is never the event's fault. */
describe('parking bounded by progress, transient errors retried', () => {
  let fx: Awaited<ReturnType<typeof kernelFixture>>;
  let producer: Producer;
  let topicIndex = 0;

  beforeAll(async () => {
    fx = await kernelFixture();
    producer = await testBroker(fx.endpoints.kafkaBrokers).producer();
  });
  afterAll(async () => {
    await producer?.disconnect();
    await fx?.close();
  });

  async function freshTopic(partitions: number): Promise<string> {
    const name = fx.topic(`parking-${topicIndex++}`);
    const admin = await testBroker(fx.endpoints.kafkaBrokers).admin();
    await admin.ensureTopics([
      { name, partitions },
      { name: dlqOf(name), partitions },
    ]);
    await admin.disconnect();
    return name;
  }

  const publish = (topic: string, messages: Message[]) =>
    producer.send([{ topic, messages: messages.map((m) => ({ key: m.key, value: encodeEvent(m.event) })) }]);

  function consumer(name: string, topics: string[], extra: Partial<InboxConsumerOptions>) {
    return new InboxConsumer({
      name,
      topics,
      broker: testBroker(fx.endpoints.kafkaBrokers),
      pool: fx.pool,
      logger: testLogger,
      apply: recordEffects,
      retryDelayMs: 10,
      ...extra,
    });
  }

  const outcomes = async (name: string) =>
    (
      await fx.pool.query<{ outcome: string; n: number }>(
        'SELECT outcome, count(*)::int AS n FROM inbox WHERE consumer = $1 GROUP BY outcome',
        [name],
      )
    ).rows;

  it('applies a parked event whose cause sits behind a backlog, long past the retry floor, and dead-letters nothing', async () => {
    const slow = await freshTopic(1);
    const fast = await freshTopic(1);
    const backlog = Array.from({ length: 300 }, (_, i) => orderEvent(`backlog-${i}`, 1));
    const cause = orderEvent('backlog-cause', 1);
    const effect = orderEvent('effect', 1, { causedBy: cause.event.event_id });
    await publish(slow, [...backlog, cause]);
    await publish(fast, [effect]);
    const name = `parking-backlog-${fx.prefix}`;
    // The retry floor is 20 + 40 ms: the old wall-clock bound dead-lettered the effect there.
    const c = consumer(name, [slow, fast], {
      deferral: { initialDelayMs: 20, maxAttempts: 3 },
      maxBytesPerPartition: 4096,
      apply: async (tx, events) => {
        // A slow consumer: the backlog takes seconds to get through.
        if (events[0]?.message.topic === slow) await tx.query('SELECT pg_sleep($1)', [events.length * 0.01]);
        await recordEffects(tx, events);
      },
    });
    const began = Date.now();
    await c.start();
    try {
      let mostAttempts = 0;
      let parkedSince: number | undefined;
      await eventually(
        'the effect applied',
        async () => {
          const { rows } = await fx.pool.query<{ attempts: number }>(
            'SELECT attempts FROM inbox_deferred WHERE consumer = $1 AND event_id = $2',
            [name, effect.event.event_id],
          );
          if (rows[0]) {
            parkedSince ??= Date.now();
            mostAttempts = Math.max(mostAttempts, rows[0].attempts);
          }
          return (await effectCounts(fx.pool)).get(effect.event.event_id) === 1;
        },
        { timeoutMs: 120_000 },
      );
      const waited = Date.now() - (parkedSince ?? began);
      // It was parked, went past the retry floor, and waited far longer than the floor's 60 ms.
      expect(parkedSince).toBeDefined();
      expect(mostAttempts).toBeGreaterThanOrEqual(3);
      expect(waited).toBeGreaterThan(1000);
      const { rows } = await fx.pool.query<{ event_id: string }>(
        'SELECT event_id::text FROM effects WHERE event_id = ANY($1::uuid[]) ORDER BY applied_at',
        [[cause.event.event_id, effect.event.event_id]],
      );
      expect(rows.map((r) => r.event_id)).toEqual([cause.event.event_id, effect.event.event_id]);
      expect(await outcomes(name)).toEqual([{ outcome: 'applied', n: backlog.length + 2 }]);
    } finally {
      await c.stop();
    }
  }, 150_000);

  it('applies a deadlock storm exactly once without a dead letter', async () => {
    const topic = await freshTopic(6);
    await fx.pool.query('CREATE TABLE IF NOT EXISTS storm (id int PRIMARY KEY, n int NOT NULL)');
    await fx.pool.query('INSERT INTO storm VALUES (1, 0), (2, 0) ON CONFLICT (id) DO UPDATE SET n = 0');
    const deadlocks = async () =>
      Number(
        (
          await fx.pool.query<{ n: string }>(
            'SELECT deadlocks::text AS n FROM pg_stat_database WHERE datname = current_database()',
          )
        ).rows[0]?.n ?? 0,
      );
    const before = await deadlocks();
    const events = Array.from({ length: 120 }, (_, i) => orderEvent(`storm-${i}`, 1));
    const name = `parking-storm-${fx.prefix}`;
    const c = consumer(name, [topic], {
      // Any failure that counts as an attempt dead-letters the event: a deadlock must not count.
      maxAttempts: 1,
      partitionsConsumedConcurrently: 6,
      maxBytesPerPartition: 1024,
      apply: async (tx, batch) => {
        // Partitions lock the two rows in opposite orders, with a pause between: deadlocks, found
        // 20 ms into a wait rather than PostgreSQL's default second.
        const [first, second] = (batch[0]?.message.partition ?? 0) % 2 === 0 ? [1, 2] : [2, 1];
        await tx.query("SET LOCAL deadlock_timeout = '20ms'");
        await tx.query('UPDATE storm SET n = n + $2 WHERE id = $1', [first, batch.length]);
        await tx.query('SELECT pg_sleep(0.03)');
        await tx.query('UPDATE storm SET n = n + $2 WHERE id = $1', [second, batch.length]);
        await recordEffects(tx, batch);
      },
    });
    await publish(topic, events);
    await c.start();
    try {
      await eventually(
        'every event handled, applied or dead-lettered',
        async () => (await outcomes(name)).reduce((n, o) => n + o.n, 0) === events.length,
        { timeoutMs: 120_000 },
      );
      await eventually('the deadlocks counted', async () => (await deadlocks()) > before, { timeoutMs: 10_000 });
      const counts = await effectCounts(fx.pool);
      expect(events.map((e) => counts.get(e.event.event_id))).toEqual(events.map(() => 1));
      expect(await outcomes(name)).toEqual([{ outcome: 'applied', n: events.length }]);
      const { rows } = await fx.pool.query<{ n: number }>('SELECT n FROM storm ORDER BY id');
      expect(rows).toEqual([{ n: events.length }, { n: events.length }]);
    } finally {
      await c.stop();
    }
  }, 150_000);
});
