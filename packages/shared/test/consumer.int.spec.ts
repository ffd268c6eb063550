import { type ChildProcess, spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { Redis } from 'ioredis';
import pg from 'pg';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { upsertIfNewer } from '../src/db/upsert.js';
import { encodeEvent } from '../src/events/envelope.js';
import { uuidv7 } from '../src/ids/uuidv7.js';
import { InboxConsumer, type InboxConsumerOptions } from '../src/inbox/consumer.js';
import { ProcessedCache } from '../src/inbox/processed-cache.js';
import type { Producer } from '../src/kafka/broker.js';
import { dlqOf } from '../src/kafka/topics.js';
import { consumedPastSentinel, createTestDatabase, eventually, testBroker, testLogger } from '../src/testing/index.js';
import {
  effectCounts,
  type KernelFixture,
  kernelFixtureWithProducer,
  kernelTracks,
  orderEvent,
  readTopic,
  recordEffects,
  sentinelsBehind,
  spawnFixture,
} from './kernel.js';

type Message = ReturnType<typeof orderEvent>;

describe('inbox consumer', () => {
  let fx: KernelFixture;
  let producer: Producer;
  let topicIndex = 0;

  beforeAll(async () => {
    ({ fx, producer } = await kernelFixtureWithProducer());
  });
  afterAll(() => fx?.close());

  /** A topic (and its DLQ) of this test's own, so each test reads only its own records. */
  async function freshTopic(): Promise<string> {
    const name = fx.topic(`consumer-${topicIndex++}`);
    const admin = await testBroker(fx.endpoints.kafkaBrokers).admin();
    await admin.ensureTopics([
      { name, partitions: 3 },
      { name: dlqOf(name), partitions: 3 },
    ]);
    await admin.disconnect();
    return name;
  }

  const publish = (topic: string, messages: (Message | { key: string; value: string })[], headers = {}) =>
    producer.send([
      {
        topic,
        messages: messages.map((m) =>
          'event' in m ? { key: m.key, value: encodeEvent(m.event), headers: { 'x-request-id': 'r1', ...headers } } : m,
        ),
      },
    ]);

  /** The consumer of `topic`, its group named `c-${topic}`, not started. */
  function consumerOf(topic: string, extra: Partial<InboxConsumerOptions> = {}) {
    return new InboxConsumer({
      name: `c-${topic}`,
      topics: [topic],
      broker: testBroker(fx.endpoints.kafkaBrokers),
      pool: fx.pool,
      logger: testLogger,
      apply: recordEffects,
      retryDelayMs: 10,
      ...extra,
    });
  }

  async function consume(topic: string, extra: Partial<InboxConsumerOptions> = {}) {
    const consumer = consumerOf(topic, extra);
    await consumer.start();
    return consumer;
  }

  /** Waits until the consumer of `topic` has committed past sentinels sent behind `messages`, on their keys. */
  const consumedPast = (topic: string, messages: Message[]) =>
    consumedPastSentinel(testBroker(fx.endpoints.kafkaBrokers), producer, {
      groupId: `c-${topic}`,
      topic,
      sentinels: sentinelsBehind(messages),
    });

  const countsFor = async (messages: Message[]) => {
    const counts = await effectCounts(fx.pool);
    return messages.map((m) => counts.get(m.event.event_id) ?? 0);
  };

  it('applies a duplicate once and counts it as an idempotency hit', async () => {
    const topic = await freshTopic();
    const messages = [orderEvent('dup-a', 1), orderEvent('dup-b', 1), orderEvent('dup-a', 2)];
    const registry = new Registry();
    await publish(topic, [...messages, messages[0] as Message, messages[2] as Message]);
    const consumer = await consume(topic, { registry });
    try {
      await eventually('effects', async () => (await countsFor(messages)).every((n) => n > 0));
      await publish(topic, messages); // redelivered again, later
      await eventually(
        'the redeliveries seen',
        async () => /onto_inbox_duplicates_total\{[^}]*\} 5/.test(await registry.metrics()) || undefined,
      );
      expect(await countsFor(messages)).toEqual([1, 1, 1]);
      const inbox = await fx.pool.query('SELECT outcome FROM inbox WHERE consumer = $1', [`c-${topic}`]);
      expect(inbox.rows).toEqual([{ outcome: 'applied' }, { outcome: 'applied' }, { outcome: 'applied' }]);
    } finally {
      await consumer.stop();
    }
  });

  it('sends a bad payload and a poison event to the DLQ with the error and original headers; the partition moves on', async () => {
    const topic = await freshTopic();
    const key = 'w1/order/same-partition';
    const good = [1, 2, 3].map((v) => ({ ...orderEvent('p', v), key }) as Message);
    const poison = { ...orderEvent('p', 99), key } as Message;
    poison.event.payload.seq = -1;
    await publish(topic, [
      good[0] as Message,
      { key, value: '{"not": "an event"' },
      good[1] as Message,
      poison,
      good[2] as Message,
    ]);
    const consumer = await consume(topic, {
      maxAttempts: 3,
      apply: async (tx, events) => {
        if (events.some((e) => e.event.payload.seq === -1)) throw new Error('injected: cannot apply seq -1');
        await recordEffects(tx, events);
      },
    });
    try {
      await eventually('good effects', async () => (await countsFor(good)).every((n) => n === 1));
      const dead = await readTopic(testBroker(fx.endpoints.kafkaBrokers), dlqOf(topic), 2);
      expect(dead).toHaveLength(2);
      const bad = dead.find((d) => String(d.value).startsWith('{"not"'));
      expect(bad?.headers).toMatchObject({
        'onto-error-type': 'InvalidEventError',
        'onto-original-topic': topic,
        'onto-consumer': `c-${topic}`,
      });
      expect(bad?.headers['onto-error']).toMatch(/is not JSON/);
      const failed = dead.find((d) => d.headers['onto-error'] === 'injected: cannot apply seq -1');
      expect(failed?.headers['x-request-id']).toBe('r1');
      expect(failed?.key).toBe(key);
      const { rows } = await fx.pool.query('SELECT outcome FROM inbox WHERE event_id = $1', [poison.event.event_id]);
      expect(rows).toEqual([{ outcome: 'dead_lettered' }]);
      expect((await countsFor([poison]))[0]).toBe(0);
      // Effects kept their order around the dead letters.
      const order = await fx.pool.query<{ seq: number }>(`SELECT seq FROM effects WHERE key = 'p' ORDER BY applied_at`);
      expect(order.rows.map((r) => r.seq)).toEqual([1, 2, 3]);
    } finally {
      await consumer.stop();
    }
  });

  it('with maxAttempts Infinity, holds the partition on a failing event until it applies, and never dead-letters', async () => {
    const topic = await freshTopic();
    const stubborn = orderEvent('hold', 1);
    const after = orderEvent('hold', 2);
    let failuresLeft = 8; // more than the default five attempts
    const consumer = await consume(topic, {
      maxAttempts: Number.POSITIVE_INFINITY,
      retryDelayMs: 5,
      apply: async (tx, events) => {
        if (events.some((e) => e.event.event_id === stubborn.event.event_id) && failuresLeft-- > 0) {
          throw new Error('injected: not yet');
        }
        await recordEffects(tx, events);
      },
    });
    try {
      await publish(topic, [stubborn, after]);
      await eventually('both applied', async () => (await countsFor([stubborn, after])).every((n) => n === 1), {
        timeoutMs: 20_000,
      });
      expect(failuresLeft).toBeLessThan(0);
      const { rows } = await fx.pool.query<{ event_id: string }>(
        `SELECT event_id::text FROM effects WHERE key = 'hold' ORDER BY applied_at`,
      );
      expect(rows.map((r) => r.event_id)).toEqual([stubborn.event.event_id, after.event.event_id]);
      const admin = await testBroker(fx.endpoints.kafkaBrokers).admin();
      const dlq = await admin.partitionOffsets(dlqOf(topic));
      await admin.disconnect();
      expect(dlq.every((p) => p.high === p.low)).toBe(true);
    } finally {
      await consumer.stop();
    }
  });

  for (const [merging, extra] of [
    ['', {}],
    [', its batches merged across partitions', { MERGE: '1' }],
  ] as const) {
    it(`killed with SIGKILL in the middle of a batch${merging}, applies every effect exactly once after restart`, {
      timeout: 90_000,
    }, async () => {
      const topic = await freshTopic();
      const messages = Array.from({ length: 900 }, (_, i) => orderEvent(`kill-${i % 45}`, Math.floor(i / 45) + 1));
      // Ten at a time: a fetch returns whole record batches whatever its byte bound, and one send
      // of 900 made one record batch per partition, so three batches held everything and the kill
      // could land after all of them.
      for (let i = 0; i < messages.length; i += 10) await publish(topic, messages.slice(i, i + 10));
      const env = {
        DATABASE_URL: fx.db.url,
        REDIS_URL: fx.endpoints.redisUrl,
        KAFKA_BROKERS: fx.endpoints.kafkaBrokers,
        TOPIC: topic,
        GROUP: `c-${topic}`,
        MAX_BYTES: '4096', // batches of about ten events
        ...extra,
      };
      // Slow inside the transaction and between its commit and the offsets' commit, so that the
      // kill lands in one of the two windows.
      const first = spawnFixture('consumer-process', { ...env, APPLY_DELAY_MS: '150', COMMIT_DELAY_MS: '150' });
      const applied = async () => (await countsFor(messages)).reduce((a, b) => a + b, 0);
      await eventually('some effects', async () => (await applied()) > 0, { timeoutMs: 30_000 }).catch((error) => {
        throw new Error(`${error.message}; the consumer printed: ${first.output()}`);
      });
      first.child.kill('SIGKILL'); // a batch is open: its effects are applied but not committed
      await first.exited;
      const before = await applied();
      expect(before).toBeGreaterThan(0);
      expect(before).toBeLessThan(900);
      expect(first.output()).toContain('applied'); // it was consuming when it died

      const second = spawnFixture('consumer-process', env);
      try {
        await eventually('every effect', async () => (await countsFor(messages)).every((n) => n > 0), {
          timeoutMs: 60_000,
        }).catch((error) => {
          throw new Error(
            `${error.message}; the killed consumer printed: ${first.output().slice(-2000)}; the restarted one: ${second.output().slice(-3000)}`,
          );
        });
        await consumedPast(topic, messages); // a late redelivery would have been applied by then
        const counts = await countsFor(messages);
        expect(counts.filter((n) => n !== 1)).toEqual([]);
      } finally {
        second.child.kill('SIGTERM');
        await second.exited;
      }
    });
  }

  it('with Redis stopped, still applies exactly once; with Redis back, uses the fast path again', async () => {
    const port = await freePort();
    const redisServer = () =>
      spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
        stdio: 'ignore',
      });
    let server: ChildProcess = redisServer();
    const redis = new Redis(port, '127.0.0.1', {
      enableOfflineQueue: false,
      maxRetriesPerRequest: 1,
      retryStrategy: () => 100,
    });
    redis.on('error', () => {});
    await eventually('redis', async () => redis.status === 'ready');
    const topic = await freshTopic();
    const registry = new Registry();
    const consumer = await consume(topic, { redis, registry });
    const metric = async (name: string, label = '') => {
      const line = (await registry.metrics()).split('\n').find((l) => l.startsWith(name) && l.includes(label));
      return Number(line?.split(' ').at(-1) ?? 0);
    };
    try {
      const before = [orderEvent('r', 1), orderEvent('r', 2)];
      await publish(topic, before);
      await eventually('before', async () => (await countsFor(before)).every((n) => n === 1));

      server.kill('SIGKILL');
      await new Promise((resolve) => server.once('exit', resolve));
      const during = [orderEvent('r', 3), orderEvent('s', 1)];
      await publish(topic, [...during, ...before, ...during]);
      await eventually('during', async () => (await countsFor(during)).every((n) => n >= 1));
      await eventually(
        'duplicates caught by PostgreSQL',
        async () => (await metric('onto_inbox_duplicates_total', 'postgres')) >= 4,
      );
      expect(await metric('onto_inbox_redis_fallbacks_total')).toBeGreaterThan(0);
      expect(await countsFor([...before, ...during])).toEqual([1, 1, 1, 1]);

      server = redisServer();
      await eventually('redis back', async () => redis.status === 'ready', { timeoutMs: 15_000 });
      const after = [orderEvent('r', 4)];
      await publish(topic, after);
      await eventually('after', async () => (await countsFor(after))[0] === 1);
      const redisHits = await metric('onto_inbox_duplicates_total', 'redis');
      await publish(topic, after);
      await eventually(
        'a duplicate caught by redis',
        async () => (await metric('onto_inbox_duplicates_total', 'redis')) > redisHits,
      );
      expect(await countsFor([...before, ...during, ...after])).toEqual([1, 1, 1, 1, 1]);
    } finally {
      await consumer.stop();
      redis.disconnect();
      server.kill('SIGKILL');
    }
  });

  it('parks an effect whose cause arrives later, with the events of its key behind it, and applies them after the cause', async () => {
    const topic = await freshTopic();
    const cause = orderEvent('cause', 1);
    const effect = orderEvent('effect', 1, { causedBy: cause.event.event_id });
    const follower = orderEvent('effect', 2); // same key as the effect, no cause of its own
    const unrelated = orderEvent('other', 1);
    const consumer = await consume(topic, { deferral: { initialDelayMs: 50, maxAttempts: 20 } });
    try {
      await publish(topic, [effect, follower, unrelated]);
      await eventually('the unrelated event', async () => (await countsFor([unrelated]))[0] === 1);
      // Behind the unrelated event: one behind the effect's key would be parked with it. The group's
      // commits cover every partition, so the effect and its follower were handled (parked) by then.
      await consumedPast(topic, [unrelated]);
      expect(await countsFor([effect, follower])).toEqual([0, 0]);
      const parked = await fx.pool.query<{ event_id: string }>(
        'SELECT event_id::text FROM inbox_deferred WHERE consumer = $1 ORDER BY seq',
        [`c-${topic}`],
      );
      expect(parked.rows.map((r) => r.event_id)).toEqual([effect.event.event_id, follower.event.event_id]);

      await publish(topic, [cause]);
      await eventually('all applied', async () => (await countsFor([cause, effect, follower])).every((n) => n === 1));
      const { rows } = await fx.pool.query<{ event_id: string }>(
        'SELECT event_id::text FROM effects ORDER BY applied_at',
      );
      const order = rows
        .map((r) => r.event_id)
        .filter((id) => [cause, effect, follower].some((m) => m.event.event_id === id));
      expect(order).toEqual([cause.event.event_id, effect.event.event_id, follower.event.event_id]);
      expect((await fx.pool.query('SELECT * FROM inbox_deferred WHERE consumer = $1', [`c-${topic}`])).rows).toEqual(
        [],
      );
    } finally {
      await consumer.stop();
    }
  });

  it('applies a parked effect soon after its cause, even when a pass ran while the effect was being parked', async () => {
    const topic = await freshTopic();
    const cause = orderEvent('raced-cause', 1);
    const effect = orderEvent('raced-effect', 1, { causedBy: cause.event.event_id });
    let consumer: InboxConsumer | undefined;
    let raced = false;
    consumer = consumerOf(topic, {
      deferral: { initialDelayMs: 50, maxAttempts: 20 },
      faults: {
        // The effect's parking is written, not committed: a pass now reads no parked events.
        beforeCommit: async () => {
          if (raced || !consumer) return;
          raced = true;
          await consumer.retryDeferred();
        },
      },
    });
    // Counts the consumer's passes over parked events, the first of which runs on its own timer
    // (the parking's timer calls its retry directly, not through the consumer).
    const parking = (consumer as unknown as { parking: { retry(): Promise<number> } }).parking;
    const pass = parking.retry.bind(parking);
    let passes = 0;
    parking.retry = () => pass().finally(() => passes++);
    await consumer.start();
    try {
      // After the consumer's first pass, which would otherwise find the effect by chance.
      await eventually("the consumer's first pass over parked events", () => passes > 0);
      await publish(topic, [effect]);
      await eventually('the effect parked', async () => {
        const { rowCount } = await fx.pool.query('SELECT 1 FROM inbox_deferred WHERE consumer = $1', [`c-${topic}`]);
        return (rowCount ?? 0) > 0;
      });
      expect(raced).toBe(true);
      const sent = Date.now();
      await publish(topic, [cause]);
      await eventually('both applied', async () => (await countsFor([cause, effect])).every((n) => n === 1));
      // Not at the next 5 s sweep: the pass that read too early did not leave the effect behind.
      expect(Date.now() - sent).toBeLessThan(2000);
    } finally {
      await consumer.stop();
    }
  });

  it('dead-letters an effect whose cause never arrives, after the bound, and lets its key go on', async () => {
    const topic = await freshTopic();
    const orphan = orderEvent('orphan', 1, { causedBy: uuidv7() }); // recent: an old cause may have been pruned (ADR 22)
    const follower = orderEvent('orphan', 2);
    const consumer = await consume(topic, { deferral: { initialDelayMs: 20, maxAttempts: 3 } });
    try {
      const began = Date.now();
      await publish(topic, [orphan, follower]);
      await eventually('the follower', async () => (await countsFor([follower]))[0] === 1, { timeoutMs: 20_000 });
      // The retries follow the backoff (20, 40 ms), not the 5 s sweep of a consumer that knows of
      // nothing parked: the timer is armed again when an event is parked.
      expect(Date.now() - began).toBeLessThan(4000);
      expect((await countsFor([orphan]))[0]).toBe(0);
      const [dead] = await readTopic(testBroker(fx.endpoints.kafkaBrokers), dlqOf(topic), 1);
      expect(dead?.headers['onto-error-type']).toBe('CauseMissing');
      expect(JSON.parse(String(dead?.value)).event_id).toBe(orphan.event.event_id);
    } finally {
      await consumer.stop();
    }
  });

  it("never trusts another database's Redis markers, even under the same consumer name", async () => {
    const redis = new Redis(fx.endpoints.redisUrl);
    const other = await createTestDatabase(fx.endpoints.postgresUrl, kernelTracks);
    const otherPool = new pg.Pool({ connectionString: other.url, max: 2 });
    try {
      const id = orderEvent('scoped', 1).event.event_id;
      const here = new ProcessedCache(redis, 'same-name', 60, () => {});
      const there = new ProcessedCache(redis, 'same-name', 60, () => {});
      await here.bind(fx.pool);
      await there.bind(otherPool);
      await here.markDone([id]);
      expect([...(await here.claim([id]))]).toEqual([id]);
      expect([...(await there.claim([id]))]).toEqual([]); // the other database decides for itself
      // A new epoch (as after a restore from backup) forgets every marker of this database too.
      await fx.pool.query('UPDATE kernel_meta SET inbox_epoch = gen_random_uuid()');
      await here.bind(fx.pool);
      expect([...(await here.claim([id]))]).toEqual([]);
    } finally {
      redis.disconnect();
      await otherPool.end();
      await other.drop();
    }
  });

  it('upserts only what is newer, whatever order the versions arrive in', async () => {
    await fx.pool.query('TRUNCATE balances');
    const rows = (key: string, version: number) => ({ key, total: version * 100, version });
    expect(await upsertIfNewer(fx.pool, 'balances', ['key'], 'version', [rows('a', 2), rows('b', 1)])).toBe(2);
    expect(await upsertIfNewer(fx.pool, 'balances', ['key'], 'version', [rows('a', 1)])).toBe(0); // older: ignored
    expect(await upsertIfNewer(fx.pool, 'balances', ['key'], 'version', [rows('a', 2)])).toBe(0); // same: ignored
    expect(await upsertIfNewer(fx.pool, 'balances', ['key'], 'version', [rows('b', 3), rows('b', 2)])).toBe(1);
    const { rows: state } = await fx.pool.query('SELECT key, total, version FROM balances ORDER BY key');
    expect(state).toEqual([
      { key: 'a', total: 200, version: 2 },
      { key: 'b', total: 300, version: 3 },
    ]);
  });

  it('keeps the newest row per composite key within one call, and tells ("ab","c") from ("a","bc")', async () => {
    await fx.pool.query('CREATE TABLE IF NOT EXISTS pairs (a text, b text, n int, version int, PRIMARY KEY (a, b))');
    const row = (a: string, b: string, version: number) => ({ a, b, n: version * 10, version });
    const written = await upsertIfNewer(fx.pool, 'pairs', ['a', 'b'], 'version', [
      row('ab', 'c', 1),
      row('a', 'bc', 2),
      row('ab', 'c', 3),
      row('a', 'bc', 1),
    ]);
    expect(written).toBe(2);
    const { rows: state } = await fx.pool.query('SELECT a, b, n, version FROM pairs ORDER BY a, b');
    expect(state).toEqual([
      { a: 'a', b: 'bc', n: 20, version: 2 },
      { a: 'ab', b: 'c', n: 30, version: 3 },
    ]);
  });
});

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}
