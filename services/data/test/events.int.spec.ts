import { encodeEvent, newEvent, uuidv7 } from '@onto/shared';
import { blockedOnLock, testBroker, testEndpoints } from '@onto/shared/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cutCommit } from '../src/storage/commit.js';
import { dataStack, type Stack } from './stack.js';

const Order = {
  displayName: 'Order',
  primaryKey: 'id',
  properties: { id: { type: 'string', required: true }, amount: { type: 'integer', indexed: true } },
};
const W = 'events';

describe('change events and the schema replica', () => {
  let s: Stack;
  let schemaVersion: number;

  beforeAll(async () => {
    s = await dataStack({ partitions: 3 });
    schemaVersion = await s.world(W, { objectTypes: { Order } });
  });
  afterAll(async () => {
    await s?.close();
  });

  it('publishes each change with its content, keyed by world + type + pk, one object in one partition in order', async () => {
    const seqs = new Map<string, number>();
    const write = async (
      method: 'PUT' | 'DELETE',
      pk: string,
      amount?: number,
      headers: Record<string, string> = {},
    ) => {
      const res = await s.dataCall(method, `/v1/worlds/${W}/objects/Order/${pk}`, {
        ...(amount === undefined ? {} : { body: { properties: { amount } } }),
        headers,
      });
      expect(res.statusCode, res.body).toBeLessThan(300);
      const seq = Number(String(res.headers['x-consistency-token']).replace('data=', ''));
      seqs.set(`${pk}@${res.headers.etag}`, seq);
      return res;
    };
    const pks = Array.from({ length: 8 }, (_, i) => `k-${i}`);
    for (const pk of pks) await write('PUT', pk, 1);
    const cause = uuidv7();
    for (const amount of [2, 3, 4]) await write('PUT', 'k-0', amount, amount === 3 ? { 'x-caused-by': cause } : {});
    await write('PUT', 'k-2', 1); // identical: nothing happens
    await write('DELETE', 'k-1');

    const seen = await s.records('onto.changes.objects', (events) => events.length >= 12);
    expect(seen).toHaveLength(12);
    for (const { record, event } of seen) {
      const pk = event.payload.pk as string;
      expect(record.key).toBe(`${W}/Order/${pk}`);
      expect(event).toMatchObject({ world_id: W, key: record.key, producer: 'data', version: event.payload.version });
      expect(event.producer_seq).toBe(seqs.get(`${pk}@"${event.version}"`));
      expect(event.payload).toMatchObject({ type: 'Order', pk, actor: 'admin', schemaVersion });
      expect(event.payload.requestId).toEqual(expect.any(String));
      expect(record.headers['x-request-id']).toBe(event.payload.requestId);
    }
    const of = (pk: string) => seen.filter((e) => e.event.payload.pk === pk);
    const k0 = of('k-0');
    expect(k0.map((e) => [e.event.type, e.event.version, e.event.payload.before, e.event.payload.after])).toEqual([
      ['object.created', 1, null, { id: 'k-0', amount: 1 }],
      ['object.updated', 2, { id: 'k-0', amount: 1 }, { id: 'k-0', amount: 2 }],
      ['object.updated', 3, { id: 'k-0', amount: 2 }, { id: 'k-0', amount: 3 }],
      ['object.updated', 4, { id: 'k-0', amount: 3 }, { id: 'k-0', amount: 4 }],
    ]);
    // A client's X-Caused-By is carried as a header, not as caused_by: no consumer waits for it (ADR 57).
    expect(k0.map((e) => e.event.caused_by)).toEqual([null, null, null, null]);
    expect(k0.map((e) => e.record.headers['x-caused-by'])).toEqual([undefined, undefined, cause, undefined]);
    expect(new Set(k0.map((e) => e.record.partition)).size).toBe(1);
    const offsets = k0.map((e) => BigInt(e.record.offset));
    expect([...offsets].sort((a, b) => (a < b ? -1 : 1))).toEqual(offsets);
    expect(of('k-1').map((e) => [e.event.type, e.event.version, e.event.payload.after])).toEqual([
      ['object.created', 1, { id: 'k-1', amount: 1 }],
      ['object.deleted', 2, null],
    ]);
    expect(of('k-2')).toHaveLength(1);
    // Objects of one world spread over partitions; each object keeps to one.
    expect(new Set(seen.map((e) => e.record.partition)).size).toBeGreaterThan(1);
    for (const pk of pks) expect(new Set(of(pk).map((e) => e.record.partition)).size).toBe(1);
  });

  it('announces each applied schema version on onto.storage, caused by the schema event', async () => {
    const viewer = await s.user('val', W, 'viewer');
    const res = await s.dataCall('GET', `/v1/worlds/${W}/schema-version`, { token: viewer });
    expect(res.json()).toMatchObject({ world: W, version: schemaVersion });
    const seen = await s.records('onto.storage', (events) =>
      events.some((e) => e.event.type === 'storage.schema.updated' && e.event.version === schemaVersion),
    );
    const applied = seen.filter((e) => e.event.type === 'storage.schema.updated');
    const { rows } = await s.data.app.pg.query<{ version: number; event_id: string }>(
      'SELECT version, event_id::text FROM schema_versions WHERE world_id = $1 ORDER BY version',
      [W],
    );
    expect(applied.map((e) => [e.event.version, e.event.caused_by])).toEqual(rows.map((r) => [r.version, r.event_id]));
    const last = applied.at(-1);
    expect(last?.record.key).toBe(W);
    expect(last?.event.payload).toMatchObject({
      world: W,
      version: schemaVersion,
      previousVersion: schemaVersion - 1,
      indexes: [{ objectType: 'Order', property: 'amount', name: expect.stringMatching(/^objects_ix_/) }],
    });
  });

  it('never moves the replica back: an older version arriving again is stored, not applied', async () => {
    const producer = await testBroker(testEndpoints().kafkaBrokers).producer();
    const stale = newEvent({
      type: 'schema.updated',
      worldId: W,
      key: W,
      version: 1,
      producer: 'control',
      producerSeq: 1,
      payload: {
        version: 1,
        previousVersion: 0,
        diff: { changes: [], breaking: false },
        schema: { objectTypes: {}, linkTypes: {}, actionTypes: {} },
        author: 'test',
      },
    });
    await producer.send([{ topic: `${s.prefix}onto.schema`, messages: [{ key: W, value: encodeEvent(stale) }] }]);
    await producer.disconnect();
    await s.until('the stale event in the inbox', async () => {
      const { rowCount } = await s.data.app.pg.query('SELECT 1 FROM inbox WHERE event_id = $1', [stale.event_id]);
      return rowCount ? true : undefined;
    });
    const res = await s.dataCall('GET', `/v1/worlds/${W}/schema-version`);
    expect(res.json().version).toBe(schemaVersion);
    const { rows } = await s.data.app.pg.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM outbox WHERE topic LIKE '%onto.storage' AND body LIKE '%storage.schema.updated%'",
    );
    expect(rows[0]?.n).toBe(schemaVersion);
    // Objects are still checked against the newest version.
    const write = await s.dataCall('PUT', `/v1/worlds/${W}/objects/Order/after-stale`, {
      body: { properties: { amount: 1 } },
    });
    expect(write.statusCode).toBe(201);
  });

  it('cuts a commit only once every write that took a seq below it has committed', async () => {
    const pool = s.data.app.pg;
    const writer = await pool.connect();
    let cut: number | undefined;
    try {
      await writer.query('BEGIN');
      const { rows } = await writer.query<{ seq: number }>(
        `INSERT INTO object_heads (world_id, type, pk, version, seq, properties, schema_version, actor)
         VALUES ($1, 'Order', 'in-flight', 1, nextval('data_seq'), '{}'::jsonb, 1, 'test') RETURNING seq`,
        [W],
      );
      const cutting = cutCommit(pool).then((c) => {
        cut = c;
      });
      await blockedOnLock(pool, 'LOCK TABLE object_heads%'); // the cut waits for the write
      expect(cut).toBeUndefined();
      await writer.query('ROLLBACK');
      await cutting;
      expect(cut).toBeGreaterThanOrEqual(rows[0]?.seq ?? Number.POSITIVE_INFINITY);
    } finally {
      writer.release();
    }
    const later = await s.dataCall('PUT', `/v1/worlds/${W}/objects/Order/after-cut`, {
      body: { properties: { amount: 1 } },
    });
    expect(Number(String(later.headers['x-consistency-token']).replace('data=', ''))).toBeGreaterThan(cut ?? 0);
  });
});
