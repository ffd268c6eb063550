import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canonicalJson } from '../src/json/canonical.js';
import { type Admin, type Producer, RecordsRefusedError } from '../src/kafka/broker.js';
import { partitionOfKey } from '../src/kafka/murmur2.js';
import { laneOf, Outbox } from '../src/outbox/outbox.js';
import {
  DEFAULT_MAX_MESSAGE_BYTES,
  EventTooLargeError,
  learnRecordLimits,
  RECORD_HEADROOM_BYTES,
  recordLimits,
} from '../src/outbox/record-limits.js';
import { OutboxRelay, redriveSetAside } from '../src/outbox/relay.js';
import { eventually, testBroker, testLogger } from '../src/testing/index.js';
import { kernelFixture, orderEvent, readTopic } from './kernel.js';

/**
 * What the broker refuses for good, refused for real: this file's links topic accepts record
 * batches of at most LIMIT bytes (its `max.message.bytes`, lowered), so that small payloads meet it.
 */
const LIMIT = 4096;

describe('outbox relay and the records the broker refuses', () => {
  let fx: Awaited<ReturnType<typeof kernelFixture>>;
  let admin: Admin;
  let producer: Producer;
  let limited: string;

  const pending = async () =>
    (await fx.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM outbox_pending')).rows[0]?.n ?? 0;
  const setAside = async () =>
    (
      await fx.pool.query<{ id: string; event_id: string; topic: string; reason: string; redriven_at: Date | null }>(
        'SELECT id, event_id::text, topic, reason, redriven_at FROM outbox_set_aside ORDER BY id',
      )
    ).rows;

  /** An order event of `bytes` padding, put straight into the outbox on `topic`: no Outbox check. */
  async function forceIntoOutbox(topic: string, key: string, version: number, bytes: number) {
    const message = orderEvent(key, version);
    const event = { ...message.event, payload: { ...message.event.payload, padding: 'p'.repeat(bytes) } };
    await fx.pool.query(
      `WITH added AS (
         INSERT INTO outbox (event_id, topic, partition_key, lane, body) VALUES ($1, $2, $3, $4, $5) RETURNING id, lane
       ) INSERT INTO outbox_pending (lane, id) SELECT lane, id FROM added`,
      [event.event_id, topic, message.key, laneOf(message.key), canonicalJson(event)],
    );
    return { ...message, event };
  }

  /** A key of the order topic whose lane is `lane`, named from `base`. */
  function keyInLane(base: string, lane: number): string {
    for (let i = 0; ; i++) if (laneOf(orderEvent(`${base}-${i}`, 1).key) === lane) return `${base}-${i}`;
  }

  /** Sets the limited topic's max.message.bytes and waits until the broker reports it. */
  async function limitTo(bytes: number) {
    await admin.alterTopicConfig(limited, { 'max.message.bytes': String(bytes) });
    await eventually(`${limited} limited to ${bytes} bytes`, async () => {
      return (await admin.maxMessageBytes([limited])).get(limited) === bytes;
    });
  }

  beforeAll(async () => {
    fx = await kernelFixture();
    limited = fx.topic('onto.changes.links');
    admin = await testBroker(fx.endpoints.kafkaBrokers).admin();
    await limitTo(LIMIT);
    producer = await testBroker(fx.endpoints.kafkaBrokers).producer();
  });
  afterAll(async () => {
    await producer?.disconnect();
    await admin?.disconnect();
    await fx?.close();
  });

  it('reads each topic limit from the broker', async () => {
    const limits = await learnRecordLimits(admin, [limited, fx.topic('onto.changes.objects')]);
    expect(limits.get(limited)).toBe(LIMIT);
    expect(limits.get(fx.topic('onto.changes.objects'))).toBeGreaterThan(LIMIT);
    expect(recordLimits.batchBytes(limited)).toBe(LIMIT);
  });

  it('sets aside an event the broker refuses, with its reason, and delivers the next events of its lane', async () => {
    // As if the limit were not known: the relay sends the oversized event with the rest of its
    // batch, the broker refuses the request, and the relay finds which event it refuses.
    recordLimits.set(new Map([[limited, DEFAULT_MAX_MESSAGE_BYTES]]));
    const big = await forceIntoOutbox(limited, 'big', 1, 2 * LIMIT);
    const lane = laneOf(big.key);
    const small = await forceIntoOutbox(limited, keyInLane('small', lane), 1, 10);
    const next = orderEvent(keyInLane('next', lane), 1);
    await new Outbox(fx.pool, fx.prefix).add(next);
    expect(laneOf(next.key)).toBe(lane);

    const registry = new Registry();
    const relay = new OutboxRelay({ pool: fx.pool, producer, logger: testLogger, registry });
    expect(await relay.drain()).toBe(3);
    expect(await pending()).toBe(0);

    const aside = await setAside();
    expect(aside.map((r) => r.event_id)).toEqual([big.event.event_id]);
    expect(aside[0]?.reason).toMatch(/^(MESSAGE_TOO_LARGE|RECORD_LIST_TOO_LARGE): /);
    const metrics = await registry.metrics();
    expect(metrics).toMatch(/^onto_outbox_set_aside_total 1$/m);
    expect(metrics).toMatch(/^onto_outbox_set_aside_waiting 1$/m);
    expect(metrics).toMatch(/^onto_outbox_published_total 2$/m);

    // Records the broker wrote from the refused request are sent again: duplicates, which the inbox skips.
    const onLimited = await readTopic(testBroker(fx.endpoints.kafkaBrokers), limited, 1);
    expect(new Set(onLimited.map((r) => r.headers['onto-event-id']))).toEqual(new Set([small.event.event_id]));
    const onObjects = await readTopic(testBroker(fx.endpoints.kafkaBrokers), fx.topic('onto.changes.objects'), 1);
    expect(new Set(onObjects.map((r) => r.headers['onto-event-id']))).toEqual(new Set([next.event.event_id]));
  });

  it('splits a batch into produce requests within the limit: events each within it all go, in order', async () => {
    await learnRecordLimits(admin, [limited]);
    const key = 'split';
    const events: Awaited<ReturnType<typeof forceIntoOutbox>>[] = [];
    // About 1.2 kB each with headers, 20 of one key: 24 kB in one claim, six times the limit.
    for (let v = 1; v <= 20; v++) events.push(await forceIntoOutbox(limited, key, v, 500));
    const before = (await setAside()).length;
    const requests = { sent: 0, refused: 0 };
    const counting: Producer = {
      async send(batches) {
        requests.sent++;
        return producer.send(batches).catch((error) => {
          if (error instanceof RecordsRefusedError) requests.refused++;
          throw error;
        });
      },
      disconnect: () => producer.disconnect(),
    };
    const relay = new OutboxRelay({ pool: fx.pool, producer: counting, logger: testLogger });
    expect(await relay.drain()).toBe(20);
    expect((await setAside()).length).toBe(before);
    // Several events to a request, and no request over the limit.
    expect(requests.refused).toBe(0);
    expect(requests.sent).toBeGreaterThan(5);
    expect(requests.sent).toBeLessThan(20);
    const records = await readTopic(testBroker(fx.endpoints.kafkaBrokers), limited, 21);
    const mine = records
      .filter((r) => r.key === events[0]?.key)
      .sort((a, b) => Number(BigInt(a.offset) - BigInt(b.offset)));
    expect(mine.map((r) => r.headers['onto-event-id'])).toEqual(events.map((e) => e.event.event_id));
  });

  it('after a refused request, sends on with a new producer: no sequence number taken back is reused', async () => {
    // kafkajs takes back the sequence numbers of every partition of a failed request, also of one
    // the broker wrote: the next send of that partition would be out of order for the broker.
    const partitions = 3;
    const refusedKey = 'seq-refused';
    let writtenKey = 'seq-written-0';
    for (let i = 1; partitionOfKey(writtenKey, partitions) === partitionOfKey(refusedKey, partitions); i++) {
      writtenKey = `seq-written-${i}`;
    }
    const value = (n: number) => JSON.stringify({ n });
    const refused = producer.send([
      {
        topic: limited,
        messages: [
          { key: refusedKey, value: 'r'.repeat(2 * LIMIT) },
          { key: writtenKey, value: value(1) },
          { key: writtenKey, value: value(2) },
        ],
      },
    ]);
    await expect(refused).rejects.toBeInstanceOf(RecordsRefusedError);
    await producer.send([{ topic: limited, messages: [{ key: writtenKey, value: value(3) }] }]);

    const records = await readTopic(testBroker(fx.endpoints.kafkaBrokers), limited, 3);
    const written = records
      .filter((r) => r.key === writtenKey)
      .sort((a, b) => Number(BigInt(a.offset) - BigInt(b.offset)))
      .map((r) => String(r.value));
    // The first two once (the broker wrote them), then the third.
    expect(written).toEqual([value(1), value(2), value(3)]);
  });

  it('redrives set-aside events once the topic takes them: each is published with its own event id', async () => {
    const waiting = (await setAside()).filter((r) => r.redriven_at === null);
    expect(waiting.length).toBeGreaterThan(0);
    await limitTo(DEFAULT_MAX_MESSAGE_BYTES);
    await learnRecordLimits(admin, [limited]);
    try {
      expect(await redriveSetAside(fx.pool)).toBe(waiting.length);
      expect(await redriveSetAside(fx.pool)).toBe(0); // once
      const relay = new OutboxRelay({ pool: fx.pool, producer, logger: testLogger });
      expect(await relay.drain()).toBe(waiting.length);
      expect((await setAside()).every((r) => r.redriven_at !== null)).toBe(true);
      const records = await readTopic(testBroker(fx.endpoints.kafkaBrokers), limited, 25);
      const ids = new Set(records.map((r) => r.headers['onto-event-id']));
      for (const r of waiting) expect(ids.has(r.event_id), r.event_id).toBe(true);
    } finally {
      await limitTo(LIMIT);
    }
  });

  it('refuses at the write an event over its topic limit, naming the limit: 413, nothing stored', async () => {
    const objects = fx.topic('onto.changes.objects');
    recordLimits.set(new Map([[objects, 4 * RECORD_HEADROOM_BYTES]]));
    const limit = 3 * RECORD_HEADROOM_BYTES; // less the headroom for headers and framing
    try {
      const message = orderEvent('too-big', 1);
      const event = { ...message.event, payload: { ...message.event.payload, padding: 'x'.repeat(limit) } };
      const refused = new Outbox(fx.pool, fx.prefix).add({ ...message, event });
      await expect(refused).rejects.toBeInstanceOf(EventTooLargeError);
      await expect(refused).rejects.toMatchObject({ status: 413, limit, topic: objects });
      await expect(refused).rejects.toThrow(`over the ${limit} bytes an event may have`);
      const fits = { ...message.event, payload: { ...message.event.payload, padding: 'x'.repeat(limit - 1000) } };
      expect(await new Outbox(fx.pool, fx.prefix).add({ ...message, event: fits })).toHaveLength(1);
      const { rows } = await fx.pool.query('SELECT event_id::text FROM outbox WHERE partition_key = $1', [message.key]);
      expect(rows).toEqual([{ event_id: fits.event_id }]);
    } finally {
      recordLimits.set(new Map([[objects, DEFAULT_MAX_MESSAGE_BYTES]]));
    }
  });

  it('sets aside a bundle that does not decode, with its reason, and delivers the next events of its lane', async () => {
    const objects = fx.topic('onto.changes.objects');
    await new OutboxRelay({ pool: fx.pool, producer, logger: testLogger, registry: new Registry() }).drain(); // what earlier tests left
    const key = 'malformed-bundle';
    const lane = laneOf(key);
    const { rows } = await fx.pool.query<{ event_id: string }>(
      `WITH added AS (
         INSERT INTO outbox (event_id, topic, partition_key, lane, body, bundle)
         VALUES (gen_random_uuid(), $1, $2, $3, $4, 2) RETURNING id, lane, event_id
       ), queued AS (INSERT INTO outbox_pending (lane, id) SELECT lane, id FROM added)
       SELECT event_id::text FROM added`,
      // a template line that is no JSON array, then a line with too few fields
      [objects, key, lane, 'not a template\nonly-an-id'],
    );
    const next = orderEvent(keyInLane('after-malformed', lane), 1);
    await new Outbox(fx.pool, fx.prefix).add(next);
    const before = (await setAside()).length;

    const registry = new Registry();
    const relay = new OutboxRelay({ pool: fx.pool, producer, logger: testLogger, registry });
    expect(await relay.drain()).toBe(2);
    expect(await pending()).toBe(0);

    const aside = (await setAside()).slice(before);
    expect(aside.map((r) => r.event_id)).toEqual([rows[0]?.event_id]);
    expect(aside[0]?.reason).toMatch(/^malformed bundle: /);
    expect(await registry.metrics()).toMatch(/^onto_outbox_set_aside_total 1$/m);
    const onObjects = await readTopic(testBroker(fx.endpoints.kafkaBrokers), objects, 2);
    expect(onObjects.map((r) => r.headers['onto-event-id'])).toContain(next.event.event_id);
    // its body is no event: a redrive leaves it where it is
    expect(await redriveSetAside(fx.pool, [Number(aside[0]?.id)])).toBe(0);
  });
});
