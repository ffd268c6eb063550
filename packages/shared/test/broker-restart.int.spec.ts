import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Broker, Consumer } from '../src/kafka/broker.js';
import { createKafkaBroker } from '../src/kafka/kafkajs-broker.js';
import { eventually, testLogger } from '../src/testing/index.js';
import { type PrivateKafka, startPrivateKafka } from '../src/testing/private-kafka.js';

// Issue 33: after the single broker restarted, consumer groups rejoined only once their old
// members' sessions (30 s) had expired: the coordinator loaded the group with them and waited for
// them to rejoin. The kafkajs patch makes a consumer that stopped without leaving join again with
// its old member id, which the coordinator takes back at once. Two members of one group, the
// broker killed and started again: records produced at its return are consumed within 5 s.
describe('consumers after a broker restart', () => {
  let kafka: PrivateKafka;
  let broker: Broker;
  const topic = 'restart.flow';

  beforeAll(async () => {
    kafka = await startPrivateKafka();
    broker = createKafkaBroker({ brokers: [kafka.brokers], clientId: 'restart-test', logger: testLogger });
    const admin = await broker.admin();
    await admin.ensureTopics([{ name: topic, partitions: 4 }]);
    await admin.disconnect();
  }, 180_000);
  afterAll(async () => {
    await kafka?.close();
  });

  it('resumes consuming within 5 s of the broker coming back', async () => {
    const seen = new Map<string, number>();
    const consumers: Consumer[] = [];
    for (let i = 0; i < 2; i++) {
      // The services' own settings: session 30 s (ConsumerOptions' default).
      const consumer = await broker.consumer({ groupId: 'restart-group', topics: [topic] });
      await consumer.run(async (batch) => {
        for (const m of batch.messages) seen.set(String(m.value), Date.now());
      });
      consumers.push(consumer);
    }
    const producer = await broker.producer();
    try {
      const send = async (tag: string) => {
        const values = [0, 1, 2, 3].map((p) => `${tag}-${p}`);
        await producer.send([{ topic, messages: values.map((value, p) => ({ key: `k${p}`, value })) }]);
        return values;
      };
      const before = await send('before');
      await eventually('both members to consume', () => before.every((v) => seen.has(v)), { timeoutMs: 60_000 });

      await kafka.stop();
      await new Promise((r) => setTimeout(r, 5000)); // the members notice: heartbeats and fetches fail
      await kafka.start();
      const backAt = Date.now();
      const after = await eventually(
        'a send once the broker is back',
        () => send('after').catch(() => undefined), // the producer's metadata may still be stale a moment
        { timeoutMs: 30_000, intervalMs: 100 },
      );
      await eventually('the records sent after the restart to be consumed', () => after.every((v) => seen.has(v)), {
        timeoutMs: 45_000,
        intervalMs: 50,
      });
      const resumedMs = Math.max(...after.map((v) => seen.get(v) as number)) - backAt;
      console.log(`consumed ${resumedMs} ms after the broker was back`);
      expect(resumedMs).toBeLessThan(5000);
    } finally {
      await producer.disconnect();
      for (const c of consumers) await c.disconnect().catch(() => {});
    }
  }, 240_000);
});
