import { Redis } from 'ioredis';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeEvent } from '../src/events/envelope.js';
import { type ApplyEffects, InboxConsumer, type ReceivedEvent } from '../src/inbox/consumer.js';
import { ProcessedCache } from '../src/inbox/processed-cache.js';
import type { IncomingBatch, IncomingMessage } from '../src/kafka/broker.js';
import { eventually, testBroker, testLogger } from '../src/testing/index.js';
import { effectCounts, kernelFixture, orderEvent, recordEffects } from './kernel.js';

type Message = ReturnType<typeof orderEvent>;

/**
 * One batch driven through `handleBatch` directly, so that what shares a batch is certain: how
 * many round trips it takes, and how causes and keys inside one batch are sorted.
 */
describe('inbox consumer, one batch at a time', () => {
  let fx: Awaited<ReturnType<typeof kernelFixture>>;
  let trips = 0;
  let n = 0;

  beforeAll(async () => {
    fx = await kernelFixture();
    const counted = new WeakSet<pg.PoolClient>();
    fx.pool.on('acquire', (client) => {
      if (counted.has(client)) return;
      counted.add(client);
      const query = client.query;
      client.query = ((...args: Parameters<typeof query>) => {
        trips++;
        return (query as (...a: unknown[]) => unknown).apply(client, args);
      }) as typeof query;
    });
  });
  afterAll(async () => {
    await fx?.close();
  });

  function consumer(
    apply: ApplyEffects = recordEffects,
    options: { mergeBatches?: boolean; mergeKey?: (item: ReceivedEvent) => string } = {},
  ) {
    return new InboxConsumer({
      name: `batch-${n++}`,
      topics: [],
      broker: testBroker(fx.endpoints.kafkaBrokers),
      pool: fx.pool,
      logger: testLogger,
      apply,
      ...options,
    });
  }

  let offset = 0;
  function batchOf(messages: Message[], partition = 0): IncomingBatch & { committed: string[] } {
    const committed: string[] = [];
    const incoming: IncomingMessage[] = messages.map((m) => ({
      topic: 't',
      partition,
      offset: String(offset++),
      key: m.key,
      value: Buffer.from(encodeEvent(m.event)),
      headers: {},
      timestamp: String(Date.now()),
    }));
    return {
      topic: 't',
      partition,
      messages: incoming,
      committed,
      heartbeat: async () => {},
      commit: async (message) => {
        committed.push(message.offset);
      },
      isRunning: () => true,
      isStale: () => false,
    };
  }

  /** Round trips to PostgreSQL while `work` runs. */
  async function roundTrips(work: () => Promise<void>): Promise<number> {
    const before = trips;
    await work();
    return trips - before;
  }

  const counts = async (messages: Message[]) => {
    const all = await effectCounts(fx.pool);
    return messages.map((m) => all.get(m.event.event_id) ?? 0);
  };

  it('takes three round trips for a batch (BEGIN with the inbox, the effects, COMMIT), two when the effects travel with COMMIT', async () => {
    const messages = [orderEvent('rt-a', 1), orderEvent('rt-b', 1), orderEvent('rt-a', 2)];
    const c = consumer();
    const batch = batchOf(messages);
    expect(await roundTrips(() => c.handleBatch(batch))).toBe(3);
    expect(await counts(messages)).toEqual([1, 1, 1]);
    expect(batch.committed).toEqual([batch.messages.at(-1)?.offset]);

    // Redelivered: the inbox knows them all, no effect runs.
    expect(await roundTrips(() => c.handleBatch(batchOf(messages)))).toBe(2);
    expect(await counts(messages)).toEqual([1, 1, 1]);

    const later = [orderEvent('rt-c', 1), orderEvent('rt-d', 1)];
    const deferring = consumer(async (_tx, events) => [
      {
        text: 'INSERT INTO effects (event_id, key, seq) SELECT * FROM unnest($1::uuid[], $2::text[], $3::int[])',
        values: [
          events.map((e) => e.event.event_id),
          events.map((e) => String(e.event.payload.key)),
          events.map((e) => Number(e.event.payload.seq)),
        ],
      },
    ]);
    expect(await roundTrips(() => deferring.handleBatch(batchOf(later)))).toBe(2);
    expect(await counts(later)).toEqual([1, 1]);
    const { rows } = await fx.pool.query('SELECT count(*)::int AS n FROM inbox WHERE event_id = ANY($1::uuid[])', [
      later.map((m) => m.event.event_id),
    ]);
    expect(rows).toEqual([{ n: 2 }]);
  });

  it('sends prepared statements with the inbox statement; a batch that is not all new is done again without them', async () => {
    const insert = (events: ReceivedEvent[]) => ({
      text: `INSERT INTO effects (event_id, key, seq) SELECT * FROM unnest($1::uuid[], $2::text[], $3::int[])
             RETURNING event_id::text`,
      values: [
        events.map((e) => e.event.event_id),
        events.map((e) => String(e.event.payload.key)),
        events.map((e) => Number(e.event.payload.seq)),
      ],
    });
    const answered: (string[] | undefined)[] = [];
    const c = new InboxConsumer({
      name: `batch-${n++}`,
      topics: [],
      broker: testBroker(fx.endpoints.kafkaBrokers),
      pool: fx.pool,
      logger: testLogger,
      prepare: (events) => [insert(events)],
      apply: async (_tx, events, prepared) => {
        answered.push(prepared?.[0]?.rows.map((r) => String(r.event_id)));
        return prepared ? [] : [insert(events)];
      },
    });
    const first = [orderEvent('bet-a', 1), orderEvent('bet-b', 1)];
    expect(await roundTrips(() => c.handleBatch(batchOf(first)))).toBe(2);
    expect(answered).toEqual([first.map((m) => m.event.event_id)]);
    expect(await counts(first)).toEqual([1, 1]);

    // A repeat in the batch: the bet is lost, rolled back, and the batch done again without it.
    const second = [orderEvent('bet-c', 1)];
    expect(await roundTrips(() => c.handleBatch(batchOf([first[0] as Message, ...second])))).toBe(2 + 2);
    expect(answered.at(-1)).toBeUndefined();
    expect(await counts([...first, ...second])).toEqual([1, 1, 1]);
    // No bet until a batch is all new again; then betting resumes.
    const third = [orderEvent('bet-d', 1)];
    expect(await roundTrips(() => c.handleBatch(batchOf(third)))).toBe(2);
    expect(answered.at(-1)).toBeUndefined();
    const fourth = [orderEvent('bet-e', 1)];
    expect(await roundTrips(() => c.handleBatch(batchOf(fourth)))).toBe(2);
    expect(answered.at(-1)).toEqual([fourth[0]?.event.event_id]);
    expect(await counts([...third, ...fourth])).toEqual([1, 1]);

    // An event to park: the same, and nothing of it applied before its cause.
    const cause = orderEvent('bet-cause', 1);
    const effect = orderEvent('bet-effect', 1, { causedBy: cause.event.event_id });
    await c.handleBatch(batchOf([effect]));
    expect(await counts([effect])).toEqual([0]);
    await c.handleBatch(batchOf([cause]));
    while ((await c.retryDeferred()) > 0) {}
    expect(await counts([cause, effect])).toEqual([1, 1]);
  });

  it('a failing write left for COMMIT rolls the batch back, inbox rows included', async () => {
    const messages = [orderEvent('fail-late', 1)];
    const failing = consumer(async () => [{ text: 'SELECT 1 / 0' }]);
    const c = failing as unknown as { process(events: unknown[]): Promise<string[]> };
    await expect(
      c.process(
        messages.map((m) => ({
          event: m.event,
          message: { topic: 't', partition: 0, offset: '0', key: m.key, headers: {} },
        })),
      ),
    ).rejects.toThrow(/division by zero/);
    const { rows } = await fx.pool.query('SELECT count(*)::int AS n FROM inbox WHERE event_id = $1', [
      messages[0]?.event.event_id,
    ]);
    expect(rows).toEqual([{ n: 0 }]);
  });

  it('inside one batch: applies an effect after its cause, parks what follows a parked cause or key, skips a repeat', async () => {
    const c = consumer();
    const cause = orderEvent('in-batch', 1);
    const effect = orderEvent('in-batch-effect', 1, { causedBy: cause.event.event_id });
    const missing = orderEvent('absent', 1); // never delivered before the end of the test's first batch
    const orphan = orderEvent('orphan-key', 1, { causedBy: missing.event.event_id });
    const orphansEffect = orderEvent('orphans-effect', 1, { causedBy: orphan.event.event_id });
    const behind = orderEvent('orphan-key', 2); // same key as the orphan, no cause of its own
    const batch = [cause, effect, orphan, orphansEffect, behind, cause];
    await c.handleBatch(batchOf(batch));

    expect(await counts([cause, effect, orphan, orphansEffect, behind])).toEqual([1, 1, 0, 0, 0]);
    const inbox = await fx.pool.query<{ event_id: string }>(
      'SELECT event_id::text FROM inbox WHERE consumer = $1 ORDER BY "offset"',
      [`batch-${n - 1}`],
    );
    expect(inbox.rows.map((r) => r.event_id)).toEqual([cause.event.event_id, effect.event.event_id]);
    const parked = await fx.pool.query<{ event_id: string }>(
      'SELECT event_id::text FROM inbox_deferred WHERE consumer = $1 ORDER BY seq',
      [`batch-${n - 1}`],
    );
    expect(parked.rows.map((r) => r.event_id)).toEqual([
      orphan.event.event_id,
      orphansEffect.event.event_id,
      behind.event.event_id,
    ]);

    // The missing cause arrives: the parked events follow, in order, each once.
    await c.handleBatch(batchOf([missing]));
    while ((await c.retryDeferred()) > 0) {}
    expect(await counts([missing, orphan, orphansEffect, behind])).toEqual([1, 1, 1, 1]);
    const { rows } = await fx.pool.query<{ event_id: string }>(
      `SELECT event_id::text FROM effects WHERE key IN ('orphan-key', 'orphans-effect') ORDER BY applied_at`,
    );
    expect(rows.map((r) => r.event_id)).toEqual([
      orphan.event.event_id,
      orphansEffect.event.event_id,
      behind.event.event_id,
    ]);
    expect((await fx.pool.query('SELECT 1 FROM inbox_deferred WHERE consumer = $1', [`batch-${n - 1}`])).rows).toEqual(
      [],
    );
  });

  /**
   * A consumer merging batches whose first transaction waits at a gate, and the partitions of
   * the events each transaction of it applied.
   */
  function gatedMerger(fail?: (partitions: number[]) => boolean, mergeKey?: (item: ReceivedEvent) => string) {
    let open: () => void = () => {};
    const gate = new Promise<void>((r) => {
      open = r;
    });
    const calls: number[][] = [];
    const c = consumer(
      async (tx, events, prepared) => {
        const partitions = [...new Set(events.map((e) => e.message.partition))].sort();
        calls.push(partitions);
        if (calls.length === 1) await gate;
        await recordEffects(tx, events, prepared);
        if (fail?.(partitions)) throw new Error('injected: this merged transaction fails');
      },
      { mergeBatches: true, ...(mergeKey ? { mergeKey } : {}) },
    );
    const queued = () => (c as unknown as { merger: { waiting: unknown[] } }).merger.waiting.length;
    return { c, calls, open, queued };
  }

  it('merging batches: those that come while a transaction runs go together in the next, each committed as its own', async () => {
    const { c, calls, open, queued } = gatedMerger();
    const groups = [0, 1, 2].map((p) => [orderEvent(`merge-${p}`, 1), orderEvent(`merge-${p}`, 2)]);
    const batches = groups.map((g, p) => batchOf(g, p));
    const running = [c.handleBatch(batches[0] as IncomingBatch)];
    await eventually('the first transaction at its gate', async () => calls.length === 1);
    running.push(...batches.slice(1).map((b) => c.handleBatch(b)));
    await eventually('the other two batches waiting', async () => queued() === 2);
    open();
    await Promise.all(running);

    expect(calls).toEqual([[0], [1, 2]]);
    const all = groups.flat();
    expect(await counts(all)).toEqual([1, 1, 1, 1, 1, 1]);
    for (const b of batches) expect(b.committed).toEqual([b.messages.at(-1)?.offset]);
    // Each inbox row names its own event's partition and offset.
    const { rows } = await fx.pool.query<{ event_id: string; partition: number; offset: string }>(
      'SELECT event_id::text, partition, "offset"::text FROM inbox WHERE consumer = $1',
      [`batch-${n - 1}`],
    );
    const where = new Map(rows.map((r) => [r.event_id, `${r.partition}@${r.offset}`]));
    for (const [p, g] of groups.entries()) {
      for (const [i, m] of g.entries()) {
        expect(where.get(m.event.event_id)).toBe(`${p}@${batches[p]?.messages[i]?.offset}`);
      }
    }
    // Delivered again, all at once: nothing applies twice.
    await Promise.all(groups.map((g, p) => c.handleBatch(batchOf(g, p))));
    expect(await counts(all)).toEqual([1, 1, 1, 1, 1, 1]);
  });

  it('merging batches: a merged transaction that fails commits nothing, and each batch then runs alone', async () => {
    const { c, calls, open, queued } = gatedMerger((partitions) => partitions.length > 1);
    const [p0, p1, p2] = [0, 1, 2].map((p) => [orderEvent(`merge-fail-${p}`, 1)]);
    const first = c.handleBatch(batchOf(p0 as Message[], 0));
    await eventually('the first transaction at its gate', async () => calls.length === 1);
    const rest = [c.handleBatch(batchOf(p1 as Message[], 1)), c.handleBatch(batchOf(p2 as Message[], 2))];
    await eventually('the other two batches waiting', async () => queued() === 2);
    open();
    await Promise.all([first, ...rest]);

    expect(calls.slice(0, 2)).toEqual([[0], [1, 2]]);
    expect(calls.slice(2).sort()).toEqual([[1], [2]]);
    expect(await counts([...(p0 as Message[]), ...(p1 as Message[]), ...(p2 as Message[])])).toEqual([1, 1, 1]);
  });

  it('merging batches by key: a batch of another world runs beside the one in flight, one of the same world waits for it', async () => {
    const { c, calls, open, queued } = gatedMerger(undefined, (item) => item.event.world_id);
    const [a1, b, a2] = [
      [orderEvent('by-key-a1', 1, { world: 'world-a' })],
      [orderEvent('by-key-b', 1, { world: 'world-b' })],
      [orderEvent('by-key-a2', 1, { world: 'world-a' })],
    ] as Message[][];
    const first = c.handleBatch(batchOf(a1 as Message[], 0));
    await eventually('the first transaction at its gate', async () => calls.length === 1);
    await c.handleBatch(batchOf(b as Message[], 1)); // done while world a's first is still at its gate
    expect(calls).toEqual([[0], [1]]);
    const second = c.handleBatch(batchOf(a2 as Message[], 2));
    await eventually("world a's second batch waiting", async () => queued() === 1);
    open();
    await Promise.all([first, second]);
    expect(calls).toEqual([[0], [1], [2]]);
    expect(await counts([...(a1 as Message[]), ...(b as Message[]), ...(a2 as Message[])])).toEqual([1, 1, 1]);
  });

  it('sends done markers to Redis with the next claim, or by themselves shortly after', async () => {
    const redis = new Redis(fx.endpoints.redisUrl);
    try {
      const here = new ProcessedCache(redis, 'markers', 60, () => {});
      const elsewhere = new ProcessedCache(redis, 'markers', 60, () => {}); // another instance, same inbox
      await here.bind(fx.pool);
      await elsewhere.bind(fx.pool);
      const [a, b, c] = [orderEvent('m', 1), orderEvent('m', 2), orderEvent('m', 3)].map((m) => m.event.event_id);
      here.markDone([a as string]);
      expect([...(await here.claim([b as string]))]).toEqual([]); // a's marker went ahead of this claim
      expect([...(await elsewhere.claim([a as string]))]).toEqual([a]);
      here.markDone([c as string]);
      await eventually(
        'the marker written without a claim',
        async () =>
          (await redis.get(`onto:inbox:${(here as unknown as { scope: string }).scope}:markers:${c}`)) === 'done',
        { timeoutMs: 2000 },
      );
    } finally {
      redis.disconnect();
    }
  });

  it('commits the offsets of what it handled without a later batch to carry them', async () => {
    const topic = fx.topic('offsets');
    const admin = await testBroker(fx.endpoints.kafkaBrokers).admin();
    const producer = await testBroker(fx.endpoints.kafkaBrokers).producer();
    const c = new InboxConsumer({
      name: `offsets-${n++}`,
      topics: [topic],
      broker: testBroker(fx.endpoints.kafkaBrokers),
      pool: fx.pool,
      logger: testLogger,
      apply: recordEffects,
    });
    try {
      await admin.ensureTopics([{ name: topic, partitions: 3 }]);
      const messages = Array.from({ length: 30 }, (_, i) => orderEvent(`offsets-${i % 7}`, Math.floor(i / 7) + 1));
      await producer.send([{ topic, messages: messages.map((m) => ({ key: m.key, value: encodeEvent(m.event) })) }]);
      await c.start();
      await eventually('effects', async () => (await counts(messages)).every((x) => x === 1), { timeoutMs: 20_000 });
      await eventually(
        'offsets committed to the end',
        async () => (await admin.consumerLag(`offsets-${n - 1}`, topic)) === 0,
        { timeoutMs: 10_000 },
      );
    } finally {
      await c.stop();
      await producer.disconnect();
      await admin.disconnect();
    }
  });
});
