import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { uuidv7 } from '../src/ids/uuidv7.js';
import { InboxConsumer, pruneInbox, uuidv7Floor } from '../src/inbox/consumer.js';
import { JobRunner } from '../src/jobs/runner.js';
import { eventually, testBroker, testLogger } from '../src/testing/index.js';
import { effectCounts, kernelFixture, orderEvent, recordEffects } from './kernel.js';

const DAY = 24 * 3600_000;

/** A UUIDv7 of a given millisecond (the generator itself never goes back in time). */
function idAt(ms: number): string {
  const hex = (n: number) => Array.from({ length: n }, () => Math.floor(Math.random() * 16).toString(16)).join('');
  const time = Math.floor(ms).toString(16).padStart(12, '0');
  return `${time.slice(0, 8)}-${time.slice(8)}-7${hex(3)}-${'89ab'[Math.floor(Math.random() * 4)]}${hex(3)}-${hex(12)}`;
}

describe('inbox retention', () => {
  let fx: Awaited<ReturnType<typeof kernelFixture>>;

  beforeAll(async () => {
    fx = await kernelFixture();
  });
  afterAll(async () => {
    await fx?.close();
  });

  /** Inbox rows of `consumer` for events drawn `ageMs` ago and processed `processedAgoMs` ago. */
  async function remember(consumer: string, rows: { ageMs: number; processedAgoMs: number }[]): Promise<string[]> {
    const ids = rows.map((r) => idAt(Date.now() - r.ageMs));
    await fx.pool.query(
      `INSERT INTO inbox (consumer, event_id, event_type, topic, partition, "offset", outcome, processed_at)
       SELECT $1, id, 'object.updated', 't', 0, n, 'applied', now() - make_interval(secs => ago / 1000)
         FROM unnest($2::uuid[], $3::double precision[]) WITH ORDINALITY AS u(id, ago, n)`,
      [consumer, ids, rows.map((r) => r.processedAgoMs)],
    );
    return ids;
  }

  const remaining = async (consumer: string) =>
    new Set(
      (
        await fx.pool.query<{ id: string }>('SELECT event_id::text AS id FROM inbox WHERE consumer = $1', [consumer])
      ).rows.map((r) => r.id),
    );

  it('orders the floor of a millisecond before every id drawn in it, and after every id drawn before', () => {
    const ms = Date.UTC(2026, 10, 29, 12);
    const floor = uuidv7Floor(ms);
    expect(floor).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7000-8000-0{12}$/);
    // The floor first: a millisecond or two may pass before the id is drawn, never the reverse.
    const aMomentAgo = uuidv7Floor(Date.now() - 1);
    expect(uuidv7() > aMomentAgo).toBe(true);
    for (let i = 0; i < 100; i++) {
      expect(idAt(ms + i) > floor).toBe(true);
      expect(idAt(ms - 1 - i) < floor).toBe(true);
    }
  });

  it('prunes only events older than the retention that were also processed before it, of its own consumer', async () => {
    const [oldA, oldB, fresh, lateClock] = await remember('keep-window', [
      { ageMs: 8 * DAY, processedAgoMs: 8 * DAY },
      { ageMs: 9 * DAY, processedAgoMs: 7.5 * DAY },
      { ageMs: 1 * DAY, processedAgoMs: 1 * DAY },
      // A producer whose clock ran 8 days behind: the id looks old, the row is an hour old.
      { ageMs: 8 * DAY, processedAgoMs: 3600_000 },
    ]);
    const [other] = await remember('another-consumer', [{ ageMs: 8 * DAY, processedAgoMs: 8 * DAY }]);

    expect(await pruneInbox(fx.pool, 'keep-window', 7 * DAY)).toBe(2);
    const left = await remaining('keep-window');
    expect(left.has(oldA as string)).toBe(false);
    expect(left.has(oldB as string)).toBe(false);
    expect([...left].sort()).toEqual([fresh, lateClock].sort());
    expect(await remaining('another-consumer')).toEqual(new Set([other]));
    // Pruning again finds nothing more.
    expect(await pruneInbox(fx.pool, 'keep-window', 7 * DAY)).toBe(0);
  });

  it('works through a large backlog in chunks', async () => {
    await remember(
      'backlog',
      Array.from({ length: 1200 }, (_, i) => ({ ageMs: 10 * DAY + i, processedAgoMs: 10 * DAY })),
    );
    await remember('backlog', [{ ageMs: 0, processedAgoMs: 0 }]);
    expect(await pruneInbox(fx.pool, 'backlog', 7 * DAY, 500)).toBe(1200);
    expect((await remaining('backlog')).size).toBe(1);
  });

  it('a running consumer is pruned by its job on its interval, and still recognises a recent duplicate', async () => {
    const topic = fx.topic('retention');
    const admin = await testBroker(fx.endpoints.kafkaBrokers).admin();
    await admin.ensureTopics([{ name: topic, partitions: 1 }]);
    await admin.disconnect();
    const name = `c-${topic}`;
    const [stale] = await remember(name, [{ ageMs: 8 * DAY, processedAgoMs: 8 * DAY }]);
    const consumer = new InboxConsumer({
      name,
      topics: [topic],
      broker: testBroker(fx.endpoints.kafkaBrokers),
      pool: fx.pool,
      logger: testLogger,
      apply: recordEffects,
      retentionMs: 7 * DAY,
      pruneIntervalMs: 100,
    });
    await consumer.start();
    // As consumersPlugin runs it in a service.
    const jobs = new JobRunner({ pool: fx.pool, logger: testLogger, pollMs: 50 });
    jobs.every(`kernel.inbox-prune: ${name}`, consumer.pruneIntervalMs, () => consumer.prune());
    await jobs.start();
    try {
      const producer = await testBroker(fx.endpoints.kafkaBrokers).producer();
      const first = orderEvent('r1', 1);
      const second = orderEvent('r1', 2);
      const record = (m: typeof first) => ({ key: m.key, value: JSON.stringify(m.event) });
      await producer.send([{ topic, messages: [record(first)] }]);
      await eventually('the first event applied', async () => (await remaining(name)).has(first.event.event_id));
      await eventually('the stale row pruned', async () => !(await remaining(name)).has(stale as string));
      // Redelivered after a pruning pass, then followed on its partition by a new event.
      await producer.send([{ topic, messages: [record(first), record(second)] }]);
      await eventually('the second event applied', async () => (await remaining(name)).has(second.event.event_id));
      const counts = await effectCounts(fx.pool);
      expect(counts.get(first.event.event_id)).toBe(1);
      expect(counts.get(second.event.event_id)).toBe(1);
      await producer.disconnect();
    } finally {
      await jobs.stop();
      await consumer.stop();
    }
  });
});
