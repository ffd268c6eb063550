import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { uuidv7 } from '../src/ids/uuidv7.js';
import type { Producer } from '../src/kafka/broker.js';
import { TOPICS } from '../src/kafka/topics.js';
import { BUNDLE_MAX } from '../src/outbox/bundle.js';
import { laneOf, Outbox, OutboxConflictError } from '../src/outbox/outbox.js';
import { DEFAULT_MAX_MESSAGE_BYTES, EventTooLargeError, recordLimits } from '../src/outbox/record-limits.js';
import { acknowledge, OutboxRelay, pendingRows } from '../src/outbox/relay.js';
import { testBroker, testLogger } from '../src/testing/index.js';
import { faultyProducer, type KernelFixture, kernelFixtureWithProducer, orderEvent, readTopic } from './kernel.js';

describe('transactional outbox', () => {
  let fx: KernelFixture;
  let producer: Producer;

  beforeAll(async () => {
    ({ fx, producer } = await kernelFixtureWithProducer());
  });
  afterAll(() => fx?.close());
  beforeEach(async () => {
    await fx.pool.query('TRUNCATE outbox, outbox_pending, outbox_sent, orders');
  });

  async function placeOrder(id: string, amount: number, fault?: () => void) {
    const client = await fx.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query('INSERT INTO orders (id, amount, version) VALUES ($1, $2, 1)', [id, amount]);
      fault?.();
      const result = await new Outbox(client, fx.prefix).add(orderEvent(id, 1));
      await client.query('COMMIT');
      return result;
    } catch (error) {
      await client.query('ROLLBACK');
      throw error;
    } finally {
      client.release();
    }
  }

  const count = async (table: string) =>
    (await fx.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table}`)).rows[0]?.n;

  it('writes the state row and the outbox row in one transaction', async () => {
    const [result] = await placeOrder('o-1', 5);
    expect(result?.status).toBe('enqueued');
    expect(await count('orders')).toBe(1);
    const [row] = await pendingRows(fx.pool, 10);
    expect(row).toMatchObject({ topic: `${fx.prefix}onto.changes.objects`, partition_key: 'w1/order/o-1' });
    expect(JSON.parse(row?.body ?? '{}')).toMatchObject({ type: 'object.updated', key: 'order/o-1', version: 1 });
  });

  it('a fault between the two writes leaves neither', async () => {
    await expect(
      placeOrder('o-2', 5, () => {
        throw new Error('injected: crash between state and outbox');
      }),
    ).rejects.toThrow('injected');
    expect(await count('orders')).toBe(0);
    expect(await count('outbox')).toBe(0);
  });

  it('a fault in the outbox write (an invalid event) rolls back the state row too', async () => {
    const client = await fx.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(`INSERT INTO orders (id, amount, version) VALUES ('o-3', 1, 1)`);
      const bad = orderEvent('o-3', 1);
      await expect(
        new Outbox(client, fx.prefix).add({ ...bad, event: { ...bad.event, version: 1.5 } }),
      ).rejects.toThrow(/\/version/);
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    expect(await count('orders')).toBe(0);
    expect(await count('outbox')).toBe(0);
  });

  it('the same id with the same body again is a no-op that says so; with another body, an error', async () => {
    const message = orderEvent('o-4', 1);
    const [first] = await new Outbox(fx.pool, fx.prefix).add(message);
    const [again] = await new Outbox(fx.pool, fx.prefix).add(message);
    expect(first?.status).toBe('enqueued');
    expect(again).toEqual({ status: 'duplicate', id: first?.id });
    const changed = { ...message, event: { ...message.event, payload: { key: 'o-4', seq: 1, amount: 999 } } };
    await expect(new Outbox(fx.pool, fx.prefix).add(changed)).rejects.toBeInstanceOf(OutboxConflictError);
    await expect(new Outbox(fx.pool, fx.prefix).add(changed)).rejects.toThrow(message.event.event_id);
    expect(await count('outbox')).toBe(1);
  });

  it('refuses a partition key from another world', async () => {
    const message = orderEvent('o-5', 1);
    const key = TOPICS['onto.changes.objects'].key({ worldId: 'other', objectType: 'order', pk: 'o-5' });
    await expect(new Outbox(fx.pool, fx.prefix).add({ ...message, key } as never)).rejects.toThrow(
      /does not belong to world w1/,
    );
  });

  it('returns pending rows in id order, in bounded batches', async () => {
    for (let i = 0; i < 7; i++) await new Outbox(fx.pool, fx.prefix).add(orderEvent(`k${i % 3}`, i + 1));
    const first = await pendingRows(fx.pool, 5);
    expect(first.map((r) => r.id)).toEqual([...first.map((r) => r.id)].sort((a, b) => a - b));
    expect(first).toHaveLength(5);
    expect((await pendingRows(fx.pool, 1000)).length).toBe(7);
    for (const bad of [0, 1001, true, 1.5, -1, '10', Number.NaN]) {
      await expect(pendingRows(fx.pool, bad as number)).rejects.toThrow(/batch size must be an integer from 1 to 1000/);
      expect(() => new OutboxRelay({ pool: fx.pool, producer, logger: testLogger, batchSize: bad as number })).toThrow(
        RangeError,
      );
    }
  });

  it('acknowledging twice is a no-op', async () => {
    await new Outbox(fx.pool, fx.prefix).add(orderEvent('a', 1));
    const [row] = await pendingRows(fx.pool, 1);
    expect(await acknowledge(fx.pool, [row?.id ?? 0])).toBe(1);
    const sentAt = (await fx.pool.query('SELECT sent_at FROM outbox_sent_rows')).rows;
    expect(sentAt).toHaveLength(1);
    expect(await acknowledge(fx.pool, [row?.id ?? 0])).toBe(0);
    expect((await fx.pool.query('SELECT sent_at FROM outbox_sent_rows')).rows).toEqual(sentAt);
    expect(await pendingRows(fx.pool, 10)).toEqual([]);
  });

  it('acknowledges only after the broker did: rows are still pending while they are published', async () => {
    for (let i = 1; i <= 3; i++) await new Outbox(fx.pool, fx.prefix).add(orderEvent('ack', i));
    const pendingDuringPublish: number[] = [];
    const observing: Producer = {
      send: async (batches) => {
        // A second connection sees the committed state while the relay's transaction is open.
        pendingDuringPublish.push((await pendingRowsOutside()).length);
        return producer.send(batches);
      },
      disconnect: async () => {},
    };
    const pendingRowsOutside = () => pendingRows(fx.pool, 100);
    const relay = new OutboxRelay({ pool: fx.pool, producer: observing, logger: testLogger, batchSize: 10 });
    expect(await relay.drain()).toBe(3);
    expect(pendingDuringPublish).toEqual([3]);
    expect(await pendingRows(fx.pool, 10)).toEqual([]);
  });

  it('a publish error propagates, counts the attempt and leaves the rows pending; the retry sends them', async () => {
    const ids = [];
    for (let i = 1; i <= 2; i++) ids.push(orderEvent('fail', i));
    await new Outbox(fx.pool, fx.prefix).add(ids);
    const faulty = faultyProducer(producer);
    faulty.failNext(1);
    const relay = new OutboxRelay({ pool: fx.pool, producer: faulty, logger: testLogger, batchSize: 10 });
    await expect(relay.publishBatch()).rejects.toThrow('injected: broker unavailable');
    const { rows } = await fx.pool.query(
      'SELECT attempts, last_error, s.sent_at FROM outbox LEFT JOIN outbox_sent_rows s USING (id) ORDER BY id',
    );
    expect(rows).toEqual([
      { attempts: 1, last_error: 'injected: broker unavailable', sent_at: null },
      { attempts: 1, last_error: 'injected: broker unavailable', sent_at: null },
    ]);
    expect(await relay.publishBatch()).toBe(2);
    expect(await pendingRows(fx.pool, 10)).toEqual([]);
  });

  it('claims the lanes with the oldest pending rows first, each in id order, skipping a lane another relay holds', async () => {
    // Keys of four different lanes; rows enqueued so that lane order by oldest row is c, a, d, b.
    const keys: string[] = [];
    const lanes = new Set<number>();
    for (let i = 0; keys.length < 4; i++) {
      const m = orderEvent(`lane-${i}`, 1);
      const lane = laneOf(m.key);
      if (!lanes.has(lane)) {
        lanes.add(lane);
        keys.push(`lane-${i}`);
      }
    }
    const [a, b, c, d] = keys as [string, string, string, string];
    for (const [key, version] of [
      [c, 1],
      [a, 1],
      [c, 2],
      [d, 1],
      [b, 1],
      [a, 2],
    ] as const) {
      await new Outbox(fx.pool, fx.prefix).add(orderEvent(key, version));
    }
    // Another relay holds d's lane for the whole test.
    const holder = await fx.pool.connect();
    await holder.query('BEGIN');
    await holder.query('SELECT pg_advisory_xact_lock($1, $2)', [0x6f6e746f, laneOf(orderEvent(d, 1).key)]);
    try {
      const sent: string[][] = [];
      const recording: Producer = {
        send: async (batches) => {
          sent.push(
            batches.flatMap((t) =>
              t.messages.map(
                (m) => `${JSON.parse(String(m.value)).payload.key}@${JSON.parse(String(m.value)).version}`,
              ),
            ),
          );
          return [];
        },
        disconnect: async () => {},
      };
      const relay = new OutboxRelay({
        pool: fx.pool,
        producer: recording,
        logger: testLogger,
        batchSize: 3,
        maxLanesPerClaim: 2,
      });
      expect(await relay.publishBatch()).toBe(3); // lanes c and a: c's rows, then a's first
      expect(await relay.publishBatch()).toBe(2); // b (its row is older than a's second), then a; d is held
      expect(await relay.publishBatch()).toBe(0);
      expect(sent).toEqual([
        [`${c}@1`, `${c}@2`, `${a}@1`],
        [`${b}@1`, `${a}@2`],
      ]);
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
    expect((await pendingRows(fx.pool, 10)).map((r) => JSON.parse(r.body).payload.key)).toEqual([d]);
  });

  it('publishes every pending row to its topic with its key, body and headers', async () => {
    const messages = [orderEvent('p1', 1), orderEvent('p2', 1), orderEvent('p1', 2)];
    await new Outbox(fx.pool, fx.prefix).add(messages.map((m) => ({ ...m, headers: { 'x-request-id': 'req-1' } })));
    const relay = new OutboxRelay({ pool: fx.pool, producer, logger: testLogger, batchSize: 100 });
    expect(await relay.drain()).toBe(3);
    const records = await readTopic(testBroker(fx.endpoints.kafkaBrokers), fx.topic('onto.changes.objects'), 3);
    const mine = records.filter((r) => r.headers['x-request-id'] === 'req-1');
    expect(mine.map((r) => r.key).sort()).toEqual(['w1/order/p1', 'w1/order/p1', 'w1/order/p2']);
    const p1 = mine.filter((r) => r.key === 'w1/order/p1');
    expect(new Set(p1.map((r) => r.partition)).size).toBe(1);
    expect(p1.map((r) => JSON.parse(String(r.value)).version)).toEqual([1, 2]);
    for (const r of mine) expect(r.headers['onto-event-id']).toBe(JSON.parse(String(r.value)).event_id);
  });

  /** Bundled events of order keys: bodies {"payload":{"key":…},"version":…} from a two-part template. */
  const PARTS = ['{"payload":{"key":', '},"version":', '}'];
  type BundledEvent = { eventId: string; key: string; lane: number; values: string[] };
  const bundled = (key: string, version: number): BundledEvent => {
    const m = orderEvent(key, version);
    return { eventId: uuidv7(), key: m.key, lane: laneOf(m.key), values: [JSON.stringify(key), String(version)] };
  };
  async function addBundles(events: BundledEvent[], headers = '{}') {
    const client = await fx.pool.connect();
    try {
      await client.query('BEGIN');
      const sample = { ...orderEvent('sample', 1), headers: JSON.parse(headers) };
      const bundles = new Outbox(client, fx.prefix).bundles({ sample, parts: PARTS });
      for (const e of events) {
        bundles.event(e.eventId, e.key, e.lane);
        for (const v of e.values) bundles.value(v);
      }
      const n = await bundles.write();
      await client.query('COMMIT');
      return n;
    } catch (error) {
      await client.query('ROLLBACK');
      throw error;
    } finally {
      client.release();
    }
  }
  /** Order keys whose events fall in `lane`, or in one lane other than `not`. */
  function keysOfLane(count: number, prefix: string, lane?: number, not?: number): string[] {
    const found: string[] = [];
    let want = lane;
    for (let i = 0; found.length < count; i++) {
      const l = laneOf(orderEvent(`${prefix}${i}`, 1).key);
      if (want === undefined && l !== not) want = l;
      if (l === want) found.push(`${prefix}${i}`);
    }
    return found;
  }

  it('publishes a bundle as a record per event, in its lane between the rows around it; a claim counts its events', async () => {
    const x = 'bx';
    const lane = laneOf(orderEvent(x, 1).key);
    const same = keysOfLane(5, 'same-', lane);
    const other = keysOfLane(3, 'other-', undefined, lane);
    await new Outbox(fx.pool, fx.prefix).add(orderEvent(x, 1));
    // One bundle in x's lane (x's second version and five more keys), one in another lane.
    const events = [bundled(x, 2), ...same.map((k) => bundled(k, 1)), ...other.map((k) => bundled(k, 1))];
    expect(await addBundles(events, '{"x-request-id":"bulk-1"}')).toBe(2);
    await new Outbox(fx.pool, fx.prefix).add(orderEvent(x, 3));

    const sent: { key: string; id: string; request: string | undefined; body: string }[][] = [];
    const recording: Producer = {
      send: async (batches) => {
        sent.push(
          batches.flatMap((t) =>
            t.messages.map((m) => ({
              key: String(m.key),
              id: String(m.headers?.['onto-event-id']),
              request: m.headers?.['x-request-id'] as string | undefined,
              body: String(m.value),
            })),
          ),
        );
        return [];
      },
      disconnect: async () => {},
    };
    const relay = new OutboxRelay({ pool: fx.pool, producer: recording, logger: testLogger, batchSize: 4 });
    // x's row, then its lane's bundle (1 event before it, fewer than 4): 7 events; x's third waits.
    expect(await relay.publishBatch()).toBe(7);
    // The other lane's bundle (older), then x's third: 4 events.
    expect(await relay.publishBatch()).toBe(4);
    expect(await relay.publishBatch()).toBe(0);
    const label = (b: string) => {
      const body = JSON.parse(b) as { payload: { key: string }; version: number };
      return `${body.payload.key}@${body.version}`;
    };
    expect(sent.map((batch) => batch.map((m) => label(m.body)))).toEqual([
      [`${x}@1`, `${x}@2`, ...same.map((k) => `${k}@1`)],
      [...other.map((k) => `${k}@1`), `${x}@3`],
    ]);
    // Each bundled record: its own key, its event id, the bundle's headers; the body as the view shows it.
    const records = sent.flat().filter((m) => m.request === 'bulk-1');
    expect(records.map((m) => m.id).sort()).toEqual(events.map((e) => e.eventId).sort());
    for (const e of events) expect(records.find((m) => m.id === e.eventId)?.key).toBe(e.key);
    const { rows: view } = await fx.pool.query<{ event_id: string; partition_key: string; body: string }>(
      'SELECT event_id::text, partition_key, body FROM outbox_events WHERE headers @> \'{"x-request-id":"bulk-1"}\'',
    );
    expect(
      view
        .map((v) => ({ key: v.partition_key, id: v.event_id, request: 'bulk-1', body: v.body }))
        .sort((a, b) => a.id.localeCompare(b.id)),
    ).toEqual([...records].sort((a, b) => a.id.localeCompare(b.id)));
  });

  it('sends a bundle through the broker: each event a record with its key, body and event id', async () => {
    const keys = keysOfLane(3, 'kb-');
    const events = keys.map((k) => bundled(k, 1));
    await addBundles(events, '{"x-request-id":"bulk-2"}');
    const relay = new OutboxRelay({ pool: fx.pool, producer, logger: testLogger, batchSize: 100 });
    expect(await relay.drain()).toBe(3);
    const records = await readTopic(testBroker(fx.endpoints.kafkaBrokers), fx.topic('onto.changes.objects'), 3);
    const mine = records.filter((r) => r.headers['x-request-id'] === 'bulk-2');
    // Different keys may land in different partitions: compared by key.
    const byKey = (a: unknown[], b: unknown[]) => String(a[0]).localeCompare(String(b[0]));
    expect(mine.map((r) => [r.key, r.headers['onto-event-id'], JSON.parse(String(r.value))]).sort(byKey)).toEqual(
      events.map((e, i) => [e.key, e.eventId, { payload: { key: keys[i] }, version: 1 }]).sort(byKey),
    );
  });

  it('keeps every byte of bundled values of any size and text, and splits a lane past BUNDLE_MAX', async () => {
    // Larger than a bundle's first buffer and than a COPY chunk (1 MB); non-ASCII, astral, and
    // characters COPY and JSON escape.
    const big = `é€😀\\ \t "q" ${'x'.repeat(16 * 1024)} ${'ü😀'.repeat(400_000)}`;
    const lane = laneOf(orderEvent('huge', 1).key);
    const many = keysOfLane(BUNDLE_MAX + 3, 'many-', lane);
    const events = [{ ...bundled('huge', 1), values: [JSON.stringify(big), '7'] }, ...many.map((k) => bundled(k, 1))];
    // An event of 2.4 MB: written only to a topic that takes records of that size.
    const topic = fx.topic('onto.changes.objects');
    recordLimits.set(new Map([[topic, 4 * 1024 * 1024]]));
    try {
      expect(await addBundles(events)).toBe(2);
    } finally {
      recordLimits.set(new Map([[topic, DEFAULT_MAX_MESSAGE_BYTES]]));
    }
    const { rows: bundles } = await fx.pool.query<{ bundle: number }>(
      'SELECT bundle FROM outbox WHERE bundle IS NOT NULL ORDER BY id',
    );
    expect(bundles.map((b) => b.bundle)).toEqual([BUNDLE_MAX, 4]);
    const { rows } = await fx.pool.query<{ event_id: string; body: string }>(
      'SELECT event_id::text, body FROM outbox_events',
    );
    const bodies = new Map(rows.map((r) => [r.event_id, JSON.parse(r.body)]));
    expect(bodies.size).toBe(events.length);
    expect(bodies.get(events[0]?.eventId ?? '')).toEqual({ payload: { key: big }, version: 7 });
    for (const [i, k] of many.entries()) {
      expect(bodies.get(events[i + 1]?.eventId ?? '')).toEqual({ payload: { key: k }, version: 1 });
    }
  });

  it("refuses a bundled event larger than its topic's broker takes (413), writing nothing", async () => {
    const limit = recordLimits.eventBytes(fx.topic('onto.changes.objects'));
    const big = { ...bundled('big', 1), values: [JSON.stringify('x'.repeat(limit)), '1'] };
    const refused = addBundles([bundled('fits', 1), big, bundled('after', 1)]);
    await expect(refused).rejects.toBeInstanceOf(EventTooLargeError);
    await expect(refused).rejects.toMatchObject({ status: 413, eventId: big.eventId, limit });
    expect(await count('outbox')).toBe(0);
    const fits = { ...bundled('big', 1), values: [JSON.stringify('x'.repeat(limit - 1000)), '1'] };
    expect(await addBundles([fits])).toBe(1);
  });

  it('refuses a bundled event with the wrong number of values, writing nothing', async () => {
    const bad = { ...bundled('bad', 1), values: ['"bad"'] };
    await expect(addBundles([bundled('good', 1), bad])).rejects.toThrow(/has 1 values, not 2/);
    expect(await count('outbox')).toBe(0);
  });

  it('prunes sent rows older than the retention, and only those', async () => {
    await new Outbox(fx.pool, fx.prefix).add([orderEvent('old', 1), orderEvent('new', 1), orderEvent('pending', 1)]);
    const [old, recent] = await pendingRows(fx.pool, 2);
    expect(await acknowledge(fx.pool, [old?.id ?? 0])).toBe(1);
    expect(await acknowledge(fx.pool, [recent?.id ?? 0])).toBe(1);
    await fx.pool.query(`UPDATE outbox SET created_at = now() - interval '3 days' WHERE id = $1`, [old?.id]);
    await fx.pool.query(`UPDATE outbox_sent SET sent_at = now() - interval '2 days' WHERE $1::bigint = ANY(ids)`, [
      old?.id,
    ]);
    const relay = new OutboxRelay({ pool: fx.pool, producer, logger: testLogger, retentionMs: 24 * 3600_000 });
    expect(await relay.prune()).toBe(1);
    const { rows } = await fx.pool.query<{ partition_key: string }>('SELECT partition_key FROM outbox ORDER BY id');
    expect(rows.map((r) => r.partition_key)).toEqual(['w1/order/new', 'w1/order/pending']);
    const marks = await fx.pool.query('SELECT id FROM outbox_sent_rows');
    expect(marks.rows).toEqual([{ id: recent?.id }]);
  });
});
