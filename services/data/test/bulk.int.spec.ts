import { canonicalJson, DEFAULT_MAX_MESSAGE_BYTES, laneOf, recordLimits, validateEvent } from '@onto/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { objectChange } from '../src/events.js';
import { dataStack, expectProblem, type Stack } from './stack.js';

const Item = {
  displayName: 'Item',
  primaryKey: 'id',
  properties: {
    id: { type: 'string', required: true },
    qty: { type: 'integer', required: true, indexed: true },
    at: { type: 'timestamp' },
    note: { type: 'string' },
  },
};

const W = 'bulkw';
const url = (type = 'Item') => `/v1/worlds/${W}/bulk/${type}`;
const ndjson = (rows: unknown[]) => `${rows.map((r) => JSON.stringify(r)).join('\n')}\n`;
const NDJSON = { 'content-type': 'application/x-ndjson' };

describe('bulk ingest', () => {
  let s: Stack;
  let editor: string;
  let viewer: string;
  const count = async (sql: string) => (await s.data.app.pg.query<{ n: number }>(sql, [W])).rows[0]?.n;
  const heads = () => count(`SELECT count(*)::int AS n FROM object_heads WHERE world_id = $1`);
  const history = () => count(`SELECT count(*)::int AS n FROM object_versions WHERE world_id = $1`);
  const outbox = () =>
    count(
      `SELECT count(*)::int AS n FROM outbox_events WHERE partition_key LIKE $1 || '/Item/%' AND topic LIKE '%objects'`,
    );

  beforeAll(async () => {
    s = await dataStack();
    await s.world(W, { objectTypes: { Item } });
    editor = await s.user('bulk-ed', W, 'editor');
    viewer = await s.user('bulk-vic', W, 'viewer');
  });
  afterAll(async () => {
    await s?.close();
  });

  it('writes nothing when any row is invalid, and reports every bad line with its path', async () => {
    const rows: unknown[] = Array.from({ length: 500 }, (_, i) => ({ properties: { id: `a${i}`, qty: i } }));
    rows[10] = { properties: { id: 'a10', qty: 'ten' } };
    rows[200] = { properties: { id: 'a200', qty: 1, at: 'yesterday', colour: 'red' } };
    rows[300] = { properties: { qty: 3 } };
    rows[400] = { properties: { id: 'a1', qty: 3 } };
    const body = `${ndjson(rows.slice(0, 450))}{not json\n${ndjson(rows.slice(450))}`;
    const res = await s.dataCall('POST', url(), { token: editor, body, headers: NDJSON });
    const problem = expectProblem(res, 422);
    expect(problem.errors).toEqual([
      { line: 11, path: '/properties/qty', message: expect.any(String) },
      { line: 201, path: '/properties/at', message: expect.any(String) },
      { line: 201, path: '/properties/colour', message: expect.any(String) },
      { line: 301, path: '/properties/id', message: expect.any(String) },
      { line: 401, path: '/properties/id', message: 'duplicates the primary key of line 2' },
      { line: 451, path: '', message: expect.stringMatching(/^is not JSON/) },
    ]);
    expect(await heads()).toBe(0);
    expect(await outbox()).toBe(0);

    // A JSON array is reported by position (+1).
    const arr = await s.dataCall('POST', url(), {
      token: editor,
      body: [{ properties: { id: 'x', qty: 1 } }, { properties: { id: 'y' } }],
    });
    expect(expectProblem(arr, 422).errors).toEqual([{ line: 2, path: '/properties/qty', message: 'is required' }]);
    expect(await heads()).toBe(0);

    // Rows are checked while the valid ones before them are copied: a fault late in pk order
    // (after 999 good rows went to PostgreSQL) still leaves nothing, and every fault is reported.
    const late = Array.from({ length: 1000 }, (_, i) => ({ properties: { id: `m${1000 + i}`, qty: i } }));
    late[3] = { properties: { id: 'zz-last', qty: -1.5 } } as never;
    late[500] = { properties: { id: 'zz-later', qty: 1, colour: 'red' } } as never;
    late[700] = { properties: { id: 'm1001', qty: 7 } }; // line 2's key again
    const lateRes = await s.dataCall('POST', url(), { token: editor, body: ndjson(late), headers: NDJSON });
    expect(expectProblem(lateRes, 422).errors).toEqual([
      { line: 4, path: '/properties/qty', message: expect.any(String) },
      { line: 501, path: '/properties/colour', message: expect.any(String) },
      { line: 701, path: '/properties/id', message: 'duplicates the primary key of line 2' },
    ]);
    expect(await heads()).toBe(0);
    expect(await history()).toBe(0);
    expect(await outbox()).toBe(0);

    // A key too long for an event fails while the rows are being copied: the copy is abandoned.
    for (let i = 0; i < 3; i++) {
      const long = await s.dataCall('POST', url(), {
        token: editor,
        body: [{ properties: { id: 'ok', qty: 1 } }, { properties: { id: 'é'.repeat(500), qty: 1 } }],
      });
      expect(long.statusCode).toBeGreaterThanOrEqual(400);
    }
    expect(await heads()).toBe(0);
  });

  it('ingests 10,000 rows with heads, history and one event per changed object; the same again changes nothing', async () => {
    const rows = Array.from({ length: 10_000 }, (_, i) => ({
      properties: { id: `o${i}`, qty: i, at: '2024-05-01T12:00:00+02:00' },
    }));
    const res = await s.dataCall('POST', url(), { token: editor, body: ndjson(rows), headers: NDJSON });
    expect(res.statusCode, res.body).toBe(200);
    const summary = res.json();
    expect(summary).toMatchObject({ created: 10_000, updated: 0, unchanged: 0 });
    expect(res.headers['x-consistency-token']).toBe(`data=${summary.seq}`);
    expect(await heads()).toBe(10_000);
    expect(await history()).toBe(10_000);
    expect(await outbox()).toBe(10_000);

    const read = await s.dataCall('GET', `/v1/worlds/${W}/objects/Item/o42`, { token: viewer });
    expect(read.json()).toEqual({
      type: 'Item',
      pk: 'o42',
      version: 1,
      properties: { id: 'o42', qty: 42, at: '2024-05-01T10:00:00.000Z' },
    });

    // Identical again (the instant spelled differently): nothing changes, nothing is emitted.
    const again = await s.dataCall('POST', url(), {
      token: editor,
      body: ndjson(rows.map((r) => ({ properties: { ...r.properties, at: '2024-05-01T10:00:00Z' } }))),
      headers: NDJSON,
    });
    expect(again.statusCode, again.body).toBe(200);
    expect(again.json()).toEqual({ created: 0, updated: 0, unchanged: 10_000, seq: summary.seq });
    expect(await history()).toBe(10_000);
    expect(await outbox()).toBe(10_000);

    // Some changed, one new, as a JSON array: versions increment, one event each.
    const mixed = await s.dataCall('POST', url(), {
      token: editor,
      body: [
        { properties: { id: 'o1', qty: 1001 } },
        { properties: { id: 'o2', qty: 2, at: '2024-05-01T10:00:00Z' } },
        { properties: { id: 'new', qty: 5 } },
      ],
    });
    expect(mixed.statusCode, mixed.body).toBe(200);
    expect(mixed.json()).toMatchObject({ created: 1, updated: 1, unchanged: 1 });
    expect(mixed.json().seq).toBeGreaterThan(summary.seq);
    const o1 = await s.dataCall('GET', `/v1/worlds/${W}/objects/Item/o1`, { token: viewer });
    expect(o1.json()).toMatchObject({ version: 2, properties: { id: 'o1', qty: 1001 } });
    expect(await outbox()).toBe(10_002);
    const { rows: ev } = await s.data.app.pg.query<{ body: { type: string; payload: { before: unknown } } }>(
      `SELECT body::jsonb AS body FROM outbox_events WHERE partition_key = $1`,
      [`${W}/Item/o1`],
    );
    expect(ev.map((r) => r.body.type).sort()).toEqual(['object.created', 'object.updated']);

    // Each body is the canonical JSON of the event objectChange makes, as a PUT's event is.
    const { rows: raw } = await s.data.app.pg.query<{ body: string; lane: number; headers: unknown }>(
      `SELECT body, lane, headers FROM outbox_events WHERE partition_key = ANY($1) ORDER BY id`,
      [[`${W}/Item/o1`, `${W}/Item/new`]],
    );
    expect(raw).toHaveLength(3);
    const changes = [
      {
        pk: 'o1',
        kind: 'created',
        version: 1,
        before: null,
        after: { id: 'o1', qty: 1, at: '2024-05-01T10:00:00.000Z' },
      },
      {
        pk: 'o1',
        kind: 'updated',
        version: 2,
        before: { id: 'o1', qty: 1, at: '2024-05-01T10:00:00.000Z' },
        after: { id: 'o1', qty: 1001 },
      },
      { pk: 'new', kind: 'created', version: 1, before: null, after: { id: 'new', qty: 5 } },
    ] as const;
    for (const row of raw) {
      const event = validateEvent(JSON.parse(row.body));
      const change = changes.find((c) => event.key === `${W}/Item/${c.pk}` && c.version === event.version);
      if (!change) throw new Error('no change');
      const payload = event.payload as { actor: string; requestId: string; schemaVersion: number; writtenAt: string };
      // The commit time is the write's written_at in data, to the microsecond (docs/adr/0069).
      const { rows: written } = await s.data.app.pg.query<{ at: string }>(
        `SELECT to_char(written_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at FROM object_history
          WHERE world_id = $1 AND seq = $2
         UNION ALL
         SELECT to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') FROM object_heads
          WHERE world_id = $1 AND seq = $2`,
        [W, event.producer_seq],
      );
      expect(written.map((r) => r.at)).toEqual([payload.writtenAt]);
      const expected = objectChange(
        {
          ...change,
          worldId: W,
          type: 'Item',
          seq: event.producer_seq,
          schemaVersion: payload.schemaVersion,
          writtenAt: payload.writtenAt,
        },
        { actor: payload.actor, requestId: payload.requestId, causedBy: null },
      );
      expect(row.body).toBe(
        canonicalJson({ ...expected.event, event_id: event.event_id, occurred_at: event.occurred_at }),
      );
      expect(row.lane).toBe(laneOf(expected.key));
      expect(row.headers).toEqual(expected.headers);
    }
  }, 30_000);

  it('lets concurrent bulk writes of overlapping keys both commit, one after the other', async () => {
    const rows = (from: number, qty: number) =>
      Array.from({ length: 2000 }, (_, i) => ({ properties: { id: `c${from + i}`, qty } }));
    const [a, b] = await Promise.all([
      s.dataCall('POST', url(), { token: editor, body: ndjson(rows(0, 1)), headers: NDJSON }),
      // The same keys in the opposite order: written in pk order, so neither waits on the other in a cycle.
      s.dataCall('POST', url(), { token: editor, body: ndjson(rows(1000, 2).reverse()), headers: NDJSON }),
    ]);
    expect(a.statusCode, a.body).toBe(200);
    expect(b.statusCode, b.body).toBe(200);
    const { rows: shared } = await s.data.app.pg.query<{ version: number; n: number; events: number }>(
      `SELECT h.version::int, (SELECT count(*)::int FROM object_versions x WHERE x.world_id = h.world_id AND x.pk = h.pk) AS n,
              (SELECT count(*)::int FROM outbox_events WHERE partition_key = $1 || '/Item/' || h.pk) AS events
         FROM object_heads h WHERE h.world_id = $1 AND h.pk = 'c1500'`,
      [W],
    );
    expect(shared).toEqual([{ version: 2, n: 2, events: 2 }]);
  }, 30_000);

  it('refuses more than 100,000 objects (413), a viewer (403) and other content types (415)', async () => {
    const tooMany = '{}\n'.repeat(100_001);
    expectProblem(await s.dataCall('POST', url(), { token: editor, body: tooMany, headers: NDJSON }), 413);
    expectProblem(
      await s.dataCall('POST', url(), {
        token: viewer,
        body: ndjson([{ properties: { id: 'v', qty: 1 } }]),
        headers: NDJSON,
      }),
      403,
    );
    expectProblem(
      await s.dataCall('POST', url(), {
        token: editor,
        body: 'id,qty\nz,1\n',
        headers: { 'content-type': 'text/csv' },
      }),
      415,
    );
    expectProblem(
      await s.dataCall('POST', url(), { token: editor, body: 'hello', headers: { 'content-type': 'text/plain' } }),
      415,
    );
    expectProblem(await s.dataCall('POST', url('Nope'), { token: editor, body: [], headers: {} }), 404);
  });

  it("refuses with 413 a bulk write with an event over its topic's limit, writing nothing", async () => {
    // The topic's limit as if the broker's max.message.bytes were 72 KiB: an event may have 64 KiB.
    const topic = `${s.data.app.topicPrefix}onto.changes.objects`;
    recordLimits.set(new Map([[topic, 72 * 1024]]));
    try {
      const note = (c: string) => c.repeat(40 * 1024);
      const rows = [
        { properties: { id: 'huge-1', qty: 1, note: note('a') } },
        { properties: { id: 'small-1', qty: 1 } },
      ];
      const created = await s.dataCall('POST', url(), { token: editor, body: ndjson(rows), headers: NDJSON });
      expect(created.statusCode, created.body).toBe(200);
      const [headsBefore, eventsBefore] = [await heads(), await outbox()];
      // Replacing it: its event holds the 40 KiB before and the 40 KiB after.
      const replace = [
        { properties: { id: 'huge-1', qty: 2, note: note('b') } },
        { properties: { id: 'small-1', qty: 2 } },
      ];
      const refused = expectProblem(
        await s.dataCall('POST', url(), { token: editor, body: ndjson(replace), headers: NDJSON }),
        413,
      );
      expect(refused.type).toBe('https://onto.dev/problems/event-too-large');
      expect(refused.limit_bytes).toBe(64 * 1024);
      expect([await heads(), await outbox()]).toEqual([headsBefore, eventsBefore]);
      const { rows: stored } = await s.data.app.pg.query(
        `SELECT pk, version FROM object_heads WHERE world_id = $1 AND pk IN ('huge-1', 'small-1') ORDER BY pk`,
        [W],
      );
      expect(stored).toEqual([
        { pk: 'huge-1', version: 1 },
        { pk: 'small-1', version: 1 },
      ]);
    } finally {
      recordLimits.set(new Map([[topic, DEFAULT_MAX_MESSAGE_BYTES]]));
    }
  });
});
