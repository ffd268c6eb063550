import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { maintainPartitions } from '../src/series/maintenance.js';
import { dataStack, expectProblem, type Stack } from './stack.js';

const Machine = {
  displayName: 'Machine',
  primaryKey: 'id',
  properties: {
    id: { type: 'string', required: true },
    name: { type: 'string' },
    temperature: { type: { type: 'series', value: 'double' }, unit: 'degC', retention: '3d' },
    cycles: { type: { type: 'series', value: 'integer' } },
    running: { type: { type: 'series', value: 'boolean' } },
    mode: { type: { type: 'series', value: { type: 'enum', values: ['idle', 'busy'] } } },
  },
};

const W = 'seriesw';
const HOUR = 3_600_000;
const url = (pk: string, series: string, query = '') => `/v1/worlds/${W}/series/Machine/${pk}/${series}${query}`;
const NDJSON = { 'content-type': 'application/x-ndjson' };
const iso = (ms: number) => new Date(ms).toISOString();

describe('time series', () => {
  let s: Stack;
  let editor: string;
  // Today's midnight (UTC) less a day: inside the 3-day retention, on a partition made ahead.
  const base = Math.floor(Date.now() / 86_400_000) * 86_400_000 - 86_400_000;
  const points = async (pk: string, series: string) =>
    (
      await s.data.app.pg.query<{ time: Date; num: number | null; label: string | null }>(
        `SELECT p.time, p.num, p.label FROM series_points p JOIN series_keys k ON k.id = p.series_id
          WHERE k.world_id = $1 AND k.pk = $2 AND k.series = $3 ORDER BY p.time`,
        [W, pk, series],
      )
    ).rows;
  const readAll = async (path: string) => {
    const all: { time: string; value: unknown }[] = [];
    let next: string | null = null;
    let pages = 0;
    do {
      const sep = path.includes('?') ? '&' : '?';
      const res = await s.dataCall('GET', next ? `${path}${sep}cursor=${next}` : path);
      expect(res.statusCode, res.body).toBe(200);
      const body = res.json() as { points: typeof all; next: string | null };
      all.push(...body.points);
      next = body.next;
      pages++;
    } while (next);
    return { all, pages };
  };

  beforeAll(async () => {
    s = await dataStack();
    await s.world(W, { objectTypes: { Machine } });
    editor = await s.user('series-ed', W, 'editor');
    const put = await s.dataCall('PUT', `/v1/worlds/${W}/objects/Machine/m1`, {
      body: { properties: { id: 'm1', name: 'press' } },
    });
    expect(put.statusCode, put.body).toBe(201);
  });
  afterAll(async () => {
    await s?.close();
  });

  it('stores points; a repeat is a no-op, another value at a known instant wins, late points land in order', async () => {
    const first = [0, 1, 2].map((i) => ({ time: iso(base + i * 60_000), value: 20 + i }));
    const res = await s.dataCall('POST', url('m1', 'temperature'), { token: editor, body: { points: first } });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({ written: 3, unchanged: 0 });
    expect(res.headers['x-consistency-token']).toMatch(/^data=\d+$/);

    const again = await s.dataCall('POST', url('m1', 'temperature'), { token: editor, body: { points: first } });
    expect(again.json()).toMatchObject({ written: 0, unchanged: 3, seq: expect.any(Number) });

    // Another value at 00:01 (last write wins), a late point at -00:05, and the same instant spelt
    // with an offset, twice in one body: the last of the body wins.
    const later = await s.dataCall('POST', url('m1', 'temperature'), {
      token: editor,
      body: {
        points: [
          { time: iso(base + 60_000), value: 25.5 },
          { time: iso(base - 5 * 60_000), value: 19 },
          { time: new Date(base + 2 * 60_000).toISOString().replace('Z', '+00:00'), value: 30 },
          { time: iso(base + 2 * 60_000), value: 22 },
        ],
      },
    });
    expect(later.json()).toMatchObject({ written: 2, unchanged: 1 });
    const stored = await points('m1', 'temperature');
    expect(stored.map((p) => [p.time.toISOString(), p.num])).toEqual([
      [iso(base - 5 * 60_000), 19],
      [iso(base), 20],
      [iso(base + 60_000), 25.5],
      [iso(base + 2 * 60_000), 22],
    ]);

    // One event per batch of a series, with the changed points only; the no-op batch announced nothing.
    const seen = await s.records('onto.series.points', (events) => events.length >= 2);
    expect(seen.map((e) => e.event.type)).toEqual(['series.points.written', 'series.points.written']);
    expect(seen[0]?.record.key).toBe(`${W}/Machine/m1`);
    expect(seen[0]?.event.payload).toMatchObject({ type: 'Machine', pk: 'm1', series: 'temperature' });
    const pointsOf = (i: number) => (seen[i]?.event.payload as { points?: unknown[] } | undefined)?.points;
    expect(pointsOf(0)).toHaveLength(3);
    expect(pointsOf(1)).toEqual([
      { time: iso(base - 5 * 60_000), value: 19 },
      { time: iso(base + 60_000), value: 25.5 },
    ]);

    // The object's own read carries the latest point of each series it has points of.
    const obj = await s.dataCall('GET', `/v1/worlds/${W}/objects/Machine/m1`);
    expect(obj.json().series).toEqual({ temperature: { time: iso(base + 2 * 60_000), value: 22 } });
  });

  it('reads ranges a page at a time, and rollups computed by PostgreSQL match those computed here', async () => {
    // 2,500 integer points every 37 s from base: about 25.7 hours.
    const values = Array.from({ length: 2500 }, (_, i) => ({ t: base + i * 37_000, v: (i * 7919) % 1000 }));
    const res = await s.dataCall('POST', url('m2', 'cycles'), {
      token: editor,
      body: { points: values.map((p) => ({ time: iso(p.t), value: p.v })) },
    });
    expect(res.json()).toMatchObject({ written: 2500 });

    const from = base + 3 * HOUR;
    const to = base + 20 * HOUR + 123_000;
    const inRange = values.filter((p) => p.t >= from && p.t < to);
    const { all, pages } = await readAll(url('m2', 'cycles', `?from=${iso(from)}&to=${iso(to)}&limit=500`));
    expect(pages).toBe(Math.ceil(inRange.length / 500));
    expect(all).toEqual(inRange.map((p) => ({ time: iso(p.t), value: p.v })));

    const buckets = new Map<number, number[]>();
    for (const p of inRange) {
      const b = Math.floor(p.t / HOUR) * HOUR;
      buckets.set(b, [...(buckets.get(b) ?? []), p.v]);
    }
    const expected = {
      min: (v: number[]) => Math.min(...v),
      max: (v: number[]) => Math.max(...v),
      sum: (v: number[]) => v.reduce((a, b) => a + b, 0),
      count: (v: number[]) => v.length,
      last: (v: number[]) => v[v.length - 1],
      avg: (v: number[]) => v.reduce((a, b) => a + b, 0) / v.length,
    };
    for (const [agg, f] of Object.entries(expected)) {
      const { all: rollup } = await readAll(
        url('m2', 'cycles', `?from=${iso(from)}&to=${iso(to)}&bucket=1h&agg=${agg}&limit=7`),
      );
      expect(rollup.map((p) => p.time)).toEqual([...buckets.keys()].map(iso));
      rollup.forEach((p, i) => {
        const want = f([...buckets.values()][i] as number[]);
        if (agg === 'avg') expect(p.value as number).toBeCloseTo(want as number, 9);
        else expect(p.value, `${agg} of ${p.time}`).toBe(want);
      });
    }
    const day = await s.dataCall('GET', url('m2', 'cycles', `?from=${iso(from)}&to=${iso(to)}&bucket=1d&agg=count`));
    const days = new Map<number, number>();
    for (const p of inRange) days.set(Math.floor(p.t / 86_400_000), (days.get(Math.floor(p.t / 86_400_000)) ?? 0) + 1);
    expect(day.json().points.map((p: { value: number }) => p.value)).toEqual([...days.values()]);
  });

  it('keeps boolean and enum points in their own types', async () => {
    const t = (i: number) => iso(base + i * 1000);
    const bool = await s.dataCall('POST', url('m3', 'running'), {
      token: editor,
      body: { points: [true, false, true, true].map((value, i) => ({ time: t(i), value })) },
    });
    expect(bool.statusCode, bool.body).toBe(200);
    const mode = await s.dataCall('POST', url('m3', 'mode'), {
      token: editor,
      body: { points: ['idle', 'busy', 'busy'].map((value, i) => ({ time: t(i), value })) },
    });
    expect(mode.statusCode, mode.body).toBe(200);
    expect(
      (await s.dataCall('GET', url('m3', 'running'))).json().points.map((p: { value: unknown }) => p.value),
    ).toEqual([true, false, true, true]);
    const avg = await s.dataCall('GET', url('m3', 'running', '?bucket=1h&agg=avg'));
    expect(avg.json().points).toEqual([{ time: iso(base), value: 0.75 }]);
    const last = await s.dataCall('GET', url('m3', 'mode', '?bucket=1d&agg=last'));
    expect(last.json().points).toEqual([{ time: iso(base), value: 'busy' }]);
    expectProblem(await s.dataCall('GET', url('m3', 'mode', '?bucket=1d&agg=avg')), 400);
  });

  it('refuses bad input with the point and field named, and stores nothing of a refused batch', async () => {
    const before = (await points('m4', 'temperature')).length;
    const bad = await s.dataCall('POST', url('m4', 'temperature'), {
      token: editor,
      body: {
        points: [
          { time: iso(base), value: 1 },
          { time: '2024-13-01T00:00:00Z', value: 2 },
          { time: iso(base + 1000), value: 'hot' },
          { time: 'yesterday', value: 3, unit: 'K' },
          { time: iso(base - 10 * 86_400_000), value: 4 },
        ],
      },
    });
    const problem = expectProblem(bad, 422);
    expect(problem.errors.map((e: { path: string }) => e.path)).toEqual([
      '/points/1/time',
      '/points/2/value',
      '/points/3/unit',
      '/points/3/time',
      '/points/4/time',
    ]);
    expect((await points('m4', 'temperature')).length).toBe(before);

    const integer = await s.dataCall('POST', url('m4', 'cycles'), {
      token: editor,
      body: { points: [{ time: iso(base), value: 1.5 }] },
    });
    expect(expectProblem(integer, 422).errors).toEqual([{ path: '/points/0/value', message: expect.any(String) }]);

    expectProblem(
      await s.dataCall('POST', url('m4', 'pressure'), {
        token: editor,
        body: { points: [{ time: iso(base), value: 1 }] },
      }),
      404,
    );
    // A property that is not a series is not one either.
    expectProblem(
      await s.dataCall('POST', url('m4', 'name'), { token: editor, body: { points: [{ time: iso(base), value: 1 }] } }),
      404,
    );
    const tooMany = Array.from({ length: 10_001 }, (_, i) => ({ time: iso(base + i), value: i }));
    expectProblem(await s.dataCall('POST', url('m4', 'cycles'), { token: editor, body: { points: tooMany } }), 413);
    expect(await points('m4', 'cycles')).toEqual([]);

    // An object's PUT cannot set a series.
    const put = await s.dataCall('PUT', `/v1/worlds/${W}/objects/Machine/m4`, {
      body: { properties: { id: 'm4', temperature: 3 } },
    });
    expect(expectProblem(put, 422).errors).toEqual([{ path: '/properties/temperature', message: expect.any(String) }]);

    for (const [query, path] of [
      ['?bucket=1hour&agg=avg', 'querystring/bucket'],
      ['?bucket=0m&agg=avg', 'querystring/bucket'],
      ['?bucket=1h&agg=median', 'querystring/agg'],
      ['?agg=avg', 'querystring/bucket'],
      ['?from=2024-01-01', 'querystring/from'],
      ['?cursor=bm9wZQ', 'querystring/cursor'],
    ]) {
      const res = await s.dataCall('GET', url('m1', 'temperature', query));
      expect(expectProblem(res, 400).errors, query).toEqual([{ path, message: expect.any(String) }]);
    }
  });

  it('takes many objects at once as a stream, a batch at a time; a bad line refuses its batch only', async () => {
    const line = (i: number) =>
      JSON.stringify({ type: 'Machine', pk: `b${i % 50}`, series: 'cycles', time: iso(base + i * 1000), value: i });
    const good = Array.from({ length: 12_000 }, (_, i) => line(i));
    const res = await s.dataCall('POST', `/v1/worlds/${W}/series`, {
      token: editor,
      body: `${good.join('\n')}\n\n`,
      headers: NDJSON,
    });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({ lines: 12_000, written: 12_000, unchanged: 0 });
    expect((await points('b7', 'cycles')).length).toBe(240);

    // Line 11,003 is in the third batch of 5,000: the two before are stored (their points repeat
    // the earlier ones: no-ops), the third is not.
    const lines = Array.from({ length: 12_000 }, (_, i) => line(i + 12_000));
    lines[11_002] = JSON.stringify({ type: 'Machine', pk: 'b1', series: 'cycles', time: iso(base), value: 'x' });
    const bad = await s.dataCall('POST', `/v1/worlds/${W}/series`, {
      token: editor,
      body: lines.join('\n'),
      headers: NDJSON,
    });
    const problem = expectProblem(bad, 422);
    expect(problem.errors).toEqual([{ line: 11_003, path: '/value', message: expect.any(String) }]);
    expect(problem.stored).toBe(10_000);
    expect((await points('b7', 'cycles')).length).toBe(240 + 200);

    const unknown = await s.dataCall('POST', `/v1/worlds/${W}/series`, {
      token: editor,
      body: `${JSON.stringify({ type: 'Machine', pk: 'b1', series: 'pressure', time: iso(base), value: 1 })}\n`,
      headers: NDJSON,
    });
    expect(expectProblem(unknown, 422).errors).toEqual([{ line: 1, path: '/series', message: expect.any(String) }]);
  });

  it('concurrent batches of the same points: each point stored once and announced once, whichever batch wrote it', async () => {
    // Appends are COPYed straight in; a batch that meets a point another one stored falls back to
    // the upsert (docs/adr/0034): three identical bodies at once, and a fourth overlapping them.
    const line = (i: number, value = i) =>
      JSON.stringify({ type: 'Machine', pk: `c${i % 10}`, series: 'cycles', time: iso(base + i * 1000), value });
    const body = Array.from({ length: 1000 }, (_, i) => line(i)).join('\n');
    const overlapping = Array.from({ length: 1000 }, (_, i) => line(i + 500, i < 500 ? i + 500 : -1)).join('\n');
    const results = await Promise.all(
      [body, body, body, overlapping].map((b) =>
        s.dataCall('POST', `/v1/worlds/${W}/series`, { token: editor, body: b, headers: NDJSON }),
      ),
    );
    for (const r of results) expect(r.statusCode, r.body).toBe(200);
    const totals = results.map((r) => r.json() as { written: number; unchanged: number });
    // 1,500 instants in all; the overlap's second half carries other values, which may land
    // before or after the first bodies' (each write is whole; the last one wins).
    const stored = (await Promise.all(Array.from({ length: 10 }, (_, k) => points(`c${k}`, 'cycles')))).flat();
    expect(stored).toHaveLength(1500);
    const written = totals.reduce((n, t) => n + t.written, 0);
    expect(totals.reduce((n, t) => n + t.written + t.unchanged, 0)).toBe(4000);
    // Every written point announced once: the events carry exactly what the answers say was written.
    const count = (events: { event: { payload: unknown } }[]) =>
      events
        .map((r) => r.event.payload as { pk: string; points: { time: string }[] })
        .filter((p) => /^c\d$/.test(p.pk))
        .reduce((n, p) => n + p.points.length, 0);
    const seen = await s.records('onto.series.points', (events) => count(events) >= written, 30_000);
    expect(count(seen)).toBe(written);
    expect(written).toBeGreaterThanOrEqual(1500);
  });

  it('drops whole day partitions once past the longest retention, and keeps the rest', async () => {
    // cycles, running and mode keep their points forever: nothing may be dropped yet.
    const far = new Date(base + 30 * 86_400_000);
    expect(await maintainPartitions(s.data.app.pg, far)).toEqual([]);
    const everyRetention = await s.controlCall('PUT', `/v1/worlds/${W}/object-types/Machine`, {
      body: {
        ...Machine,
        properties: {
          ...Machine.properties,
          cycles: { type: { type: 'series', value: 'integer' }, retention: '2d' },
          running: { type: { type: 'series', value: 'boolean' }, retention: '2d' },
          mode: { type: { type: 'series', value: { type: 'enum', values: ['idle', 'busy'] } }, retention: '2d' },
        },
      },
    });
    expect(everyRetention.statusCode, everyRetention.body).toBe(200);
    await s.until('the new retention in data', async () => {
      const { rows } = await s.data.app.pg.query(
        "SELECT 1 FROM schema_versions WHERE world_id = $1 AND document #>> '{objectTypes,Machine,properties,cycles,retention}' = '2d'",
        [W],
      );
      return rows.length > 0 ? true : undefined;
    });
    const day = (ms: number) => `series_points_p${iso(ms).slice(0, 10).replaceAll('-', '')}`;
    const partitions = async () =>
      (
        await s.data.app.pg.query<{ name: string }>(
          "SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'series_points'::regclass",
        )
      ).rows.map((r) => r.name);
    expect(await partitions()).toContain(day(base));
    const kept = (await points('m1', 'temperature')).length;
    expect(kept).toBeGreaterThan(0);

    // Three days after base's day ends, the longest retention (3d) still covers it; four days after, not.
    expect(await maintainPartitions(s.data.app.pg, new Date(base + 4 * 86_400_000 - 1))).not.toContain(day(base));
    const dropped = await maintainPartitions(s.data.app.pg, new Date(base + 4 * 86_400_000 + 1));
    expect(dropped).toContain(day(base));
    expect(dropped).not.toContain(day(base + 86_400_000));
    expect(await partitions()).not.toContain(day(base));
    expect(await partitions()).toContain(day(base + 86_400_000));
    // The points of that day are gone with it; those of the next day stay.
    const left = await points('m2', 'cycles');
    expect(left.length).toBeGreaterThan(0);
    expect(left.every((p) => p.time.getTime() >= base + 86_400_000)).toBe(true);
  });
});
