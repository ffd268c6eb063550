import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inTransactionTogether } from '../src/db/pipeline.js';
import { inTransaction } from '../src/db/transaction.js';
import { InboxConsumer } from '../src/inbox/consumer.js';
import type { Producer } from '../src/kafka/broker.js';
import { Outbox } from '../src/outbox/outbox.js';
import { OutboxRelay, pendingRows } from '../src/outbox/relay.js';
import { consumedPastSentinel, eventually, testBroker, testLogger } from '../src/testing/index.js';
import {
  effectCounts,
  type KernelFixture,
  kernelFixtureWithProducer,
  onIdleClaim,
  orderEvent,
  readTopic,
  recordEffects,
  sentinelsBehind,
  spawnFixture,
} from './kernel.js';

describe('outbox relay', () => {
  let fx: KernelFixture;
  let producer: Producer;
  const pending = async () =>
    (await fx.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM outbox_pending')).rows[0]?.n ?? 0;
  /**
   * Empties the outbox (and `more` tables). A relay process an earlier test killed can leave its
   * backend inside a claim until PostgreSQL notices the closed socket; TRUNCATE then may deadlock
   * with it and be the one rolled back (a CI run saw it), so it is tried again.
   */
  const emptyOutbox = (...more: string[]) =>
    eventually('the outbox emptied without a deadlock', async () => {
      try {
        await fx.pool.query(`TRUNCATE ${['outbox', 'outbox_pending', 'outbox_sent', ...more].join(', ')}`);
        return true;
      } catch (error) {
        if ((error as { code?: string }).code !== '40P01') throw error;
        return false;
      }
    });

  /**
   * Starts a relay whose two loops sleep on a 60 s poll, runs `write`, and expects its event sent
   * within 2 s: the write woke the relay.
   */
  async function expectWokenAtOnceBy(write: () => Promise<unknown>) {
    await emptyOutbox();
    const relay = new OutboxRelay({
      pool: fx.pool,
      producer,
      logger: testLogger,
      concurrency: 2,
      pollIntervalMs: 60_000,
    });
    let idle = 0;
    onIdleClaim(relay, () => idle++);
    await relay.start();
    try {
      await eventually('both loops asleep on their 60 s poll', () => idle >= 2);
      const started = Date.now();
      await write();
      await eventually('sent', async () => (await pending()) === 0, { timeoutMs: 5000 });
      expect(Date.now() - started).toBeLessThan(2000);
    } finally {
      await relay.stop();
    }
  }

  beforeAll(async () => {
    ({ fx, producer } = await kernelFixtureWithProducer());
  });
  afterAll(() => fx?.close());

  it('delivered twice, effect once: the relay dies after the broker acknowledged, before marking sent', async () => {
    await emptyOutbox('effects', 'inbox');
    const messages = [orderEvent('twice', 1), orderEvent('twice', 2), orderEvent('once', 1)];
    await new Outbox(fx.pool, fx.prefix).add(messages);
    const crashing = new OutboxRelay({
      pool: fx.pool,
      producer,
      logger: testLogger,
      faults: {
        afterPublish: () => {
          throw new Error('injected: relay died before acknowledging');
        },
      },
    });
    await expect(crashing.publishBatch()).rejects.toThrow('injected');
    expect(await pending()).toBe(3); // published, but not marked sent

    const relay = new OutboxRelay({ pool: fx.pool, producer, logger: testLogger });
    expect(await relay.drain()).toBe(3);
    expect(await pending()).toBe(0);

    const topic = fx.topic('onto.changes.objects');
    const records = await readTopic(testBroker(fx.endpoints.kafkaBrokers), topic, 6);
    const ids = messages.map((m) => m.event.event_id);
    for (const id of ids) expect(records.filter((r) => r.headers['onto-event-id'] === id)).toHaveLength(2);

    const consumer = new InboxConsumer({
      name: 'twice',
      topics: [topic],
      broker: testBroker(fx.endpoints.kafkaBrokers),
      pool: fx.pool,
      logger: testLogger,
      apply: recordEffects,
    });
    await consumer.start();
    try {
      await eventually('three effects', async () => (await effectCounts(fx.pool)).size === 3);
      // The second copies were handled by then: applying one again would count it twice.
      await consumedPastSentinel(testBroker(fx.endpoints.kafkaBrokers), producer, {
        groupId: 'twice',
        topic,
        sentinels: sentinelsBehind(messages),
      });
      const counts = await effectCounts(fx.pool);
      expect(ids.map((id) => counts.get(id))).toEqual([1, 1, 1]);
      const { rows } = await fx.pool.query('SELECT count(*)::int AS n FROM outbox_sent_rows');
      expect(rows[0]?.n).toBe(3);
    } finally {
      await consumer.stop();
    }
  });

  it('two relay processes at once keep per-key order on every partition', async () => {
    await emptyOutbox();
    const keys = Array.from({ length: 24 }, (_, i) => `order-${i}`);
    const versions = 60;
    const relays = [0, 1].map(() =>
      spawnFixture('relay-process', {
        DATABASE_URL: fx.db.url,
        KAFKA_BROKERS: fx.endpoints.kafkaBrokers,
        BATCH_SIZE: '50',
        CONCURRENCY: '2',
        // Few lanes per claim, each held a little while: one relay cannot take every lane,
        // so the other must publish some (a fast relay alone once drained everything).
        MAX_LANES: '3',
        PUBLISH_DELAY_MS: '10',
      }),
    );
    try {
      await eventually('both relays', async () => relays.every((r) => r.output().includes('relay started')), {
        timeoutMs: 30_000,
      });
      // Written while both relays run: each version of a key in its own transaction, in order.
      for (let v = 1; v <= versions; v++) {
        await new Outbox(fx.pool, fx.prefix).add(keys.map((k) => orderEvent(k, v, { world: 'order-world' })));
      }
      const total = keys.length * versions;
      await eventually('the outbox drained', async () => (await pending()) === 0, { timeoutMs: 60_000 });
      const published = relays.map((r) => r.output().match(/published (\d+)/g)?.length ?? 0);
      expect(
        published.every((n) => n > 0),
        `both relays published (${published})`,
      ).toBe(true);

      const records = await readTopic(testBroker(fx.endpoints.kafkaBrokers), fx.topic('onto.changes.objects'), total);
      const byPartition = new Map<number, typeof records>();
      for (const r of records) {
        if (!r.key?.startsWith('order-world/')) continue;
        byPartition.set(r.partition, [...(byPartition.get(r.partition) ?? []), r]);
      }
      let seen = 0;
      for (const list of byPartition.values()) {
        list.sort((a, b) => Number(BigInt(a.offset) - BigInt(b.offset)));
        const last = new Map<string, number>();
        for (const r of list) {
          const version = JSON.parse(String(r.value)).version as number;
          expect(version, `${r.key} at offset ${r.offset}`).toBe((last.get(r.key ?? '') ?? 0) + 1);
          last.set(r.key ?? '', version);
          seen++;
        }
      }
      expect(seen).toBe(total);
    } finally {
      for (const r of relays) r.child.kill('SIGKILL');
      await Promise.all(relays.map((r) => r.exited));
    }
  }, 120_000); // two processes start (tsx) and drain on a loaded CI machine

  it('a relay killed with SIGKILL between publish and mark loses nothing: the batch goes twice on the wire, its effects once', async () => {
    await emptyOutbox('effects', 'inbox');
    const messages = Array.from({ length: 600 }, (_, i) =>
      orderEvent(`kill-${i % 30}`, Math.floor(i / 30) + 1, { world: 'kill' }),
    );
    await new Outbox(fx.pool, fx.prefix).add(messages);
    const env = { DATABASE_URL: fx.db.url, KAFKA_BROKERS: fx.endpoints.kafkaBrokers, BATCH_SIZE: '50' };
    const first = spawnFixture('relay-process', { ...env, PUBLISH_DELAY_MS: '200' });
    // Killed after some batches were acknowledged, while the next is published but not yet marked.
    await eventually('a batch acknowledged', async () => (await pending()) < 600, { timeoutMs: 30_000 });
    const batches = first.output().split('published').length;
    await eventually('the next batch published', async () => first.output().split('published').length > batches, {
      timeoutMs: 30_000,
    });
    first.child.kill('SIGKILL');
    await first.exited;
    const left = await pending();
    expect(left).toBeGreaterThan(0);
    expect(left).toBeLessThan(600);

    const second = spawnFixture('relay-process', env);
    try {
      await eventually('the outbox drained', async () => (await pending()) === 0, { timeoutMs: 60_000 });
    } finally {
      second.child.kill('SIGTERM');
      await second.exited;
    }
    const records = await readTopic(testBroker(fx.endpoints.kafkaBrokers), fx.topic('onto.changes.objects'), 600);
    const delivered = new Set(records.map((r) => r.headers['onto-event-id']));
    const missing = messages.filter((m) => !delivered.has(m.event.event_id));
    expect(missing).toEqual([]);
    expect(await pendingRows(fx.pool, 10)).toEqual([]);
    // The batch the broker acknowledged and the killed relay never marked went again.
    expect(records.length).toBeGreaterThan(delivered.size);

    const topic = fx.topic('onto.changes.objects');
    const consumer = new InboxConsumer({
      name: 'after-kill',
      topics: [topic],
      broker: testBroker(fx.endpoints.kafkaBrokers),
      pool: fx.pool,
      logger: testLogger,
      apply: recordEffects,
    });
    await consumer.start();
    try {
      await consumedPastSentinel(testBroker(fx.endpoints.kafkaBrokers), producer, {
        groupId: 'after-kill',
        topic,
        sentinels: sentinelsBehind(messages),
      });
      const counts = await effectCounts(fx.pool);
      expect(messages.filter((m) => counts.get(m.event.event_id) !== 1)).toEqual([]);
    } finally {
      await consumer.stop();
    }
  }, 120_000);

  it('wakes at once when a transaction of this process enqueues, without waiting for its poll', async () => {
    await expectWokenAtOnceBy(() =>
      inTransaction(fx.pool, (tx) => new Outbox(tx, fx.prefix).add(orderEvent('local-wake', 1))),
    );
  });

  it('wakes at once when a writer sends its outbox statement with COMMIT, without waiting for its poll', async () => {
    await expectWokenAtOnceBy(() =>
      inTransactionTogether(fx.pool, [], async (tx) => ({
        value: undefined,
        last: [new Outbox(tx, fx.prefix).addStatement(orderEvent('with-commit', 1))],
      })),
    );
  });

  it('wakes a relay in another process by NOTIFY, sent after the commit', async () => {
    await emptyOutbox();
    const other = spawnFixture('relay-process', {
      DATABASE_URL: fx.db.url,
      KAFKA_BROKERS: fx.endpoints.kafkaBrokers,
      POLL_MS: '60000',
    });
    try {
      await eventually('the relay', async () => other.output().includes('relay started'), { timeoutMs: 30_000 });
      await eventually(
        'both loops of the relay asleep on their 60 s poll',
        () => other.output().split('found nothing').length > 2,
      );
      const started = Date.now();
      await inTransaction(fx.pool, (tx) => new Outbox(tx, fx.prefix).add(orderEvent('notify', 1)));
      await eventually('sent by the other process', async () => (await pending()) === 0, { timeoutMs: 10_000 });
      expect(Date.now() - started).toBeLessThan(3000);
      expect(other.output()).toContain('published 1');
    } finally {
      other.child.kill('SIGKILL');
      await other.exited;
    }
  });

  it('falls back to polling when a notification is lost', async () => {
    await emptyOutbox();
    const relay = new OutboxRelay({ pool: fx.pool, producer, logger: testLogger, concurrency: 2, pollIntervalMs: 300 });
    let idle = 0;
    onIdleClaim(relay, () => idle++);
    await relay.start();
    try {
      // After the loops' first claims, so that a poll, not the start, finds the row.
      await eventually('both loops asleep until their poll', () => idle >= 2);
      // Inserted behind the Outbox's back: no NOTIFY is sent, as when the listener was reconnecting.
      const m = orderEvent('lost-notify', 1);
      await fx.pool.query(
        `WITH o AS (INSERT INTO outbox (event_id, topic, partition_key, lane, body) VALUES ($1, $2, $3, 0, $4) RETURNING id)
         INSERT INTO outbox_pending (lane, id) SELECT 0, id FROM o`,
        [m.event.event_id, fx.topic('onto.changes.objects'), m.key, JSON.stringify(m.event)],
      );
      await eventually('sent by the poll', async () => (await pending()) === 0, { timeoutMs: 5000 });
    } finally {
      await relay.stop();
    }
  });

  it('reports backlog, oldest pending age, published and failures as metrics', async () => {
    await emptyOutbox();
    const { Registry } = await import('prom-client');
    const registry = new Registry();
    const relay = new OutboxRelay({ pool: fx.pool, producer, logger: testLogger, registry });
    await new Outbox(fx.pool, fx.prefix).add([orderEvent('m', 1), orderEvent('m', 2)]);
    await fx.pool.query(`UPDATE outbox SET created_at = now() - interval '5 seconds'`);
    let text = await registry.metrics();
    expect(text).toMatch(/onto_outbox_backlog 2/);
    expect(Number(text.match(/^onto_outbox_oldest_pending_age_seconds (\S+)/m)?.[1])).toBeGreaterThanOrEqual(5);
    await relay.drain();
    text = await registry.metrics();
    expect(text).toMatch(/onto_outbox_backlog 0/);
    expect(text).toMatch(/onto_outbox_published_total 2/);
    expect(text).toMatch(/onto_outbox_oldest_pending_age_seconds 0/);
  });
});
