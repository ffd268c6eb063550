import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dataStack, forkThroughControl, type Stack } from './stack.js';

const Machine = {
  displayName: 'Machine',
  primaryKey: 'id',
  properties: {
    id: { type: 'string', required: true },
    temperature: { type: { type: 'series', value: 'double' } },
  },
};
const HOUR = 3_600_000;
const iso = (ms: number) => new Date(ms).toISOString();

describe('time series on branches', () => {
  let s: Stack;
  // Yesterday's midnight (UTC): on a partition made ahead.
  const day = Math.floor(Date.now() / 86_400_000) * 86_400_000 - 86_400_000;
  const at = (i: number) => iso(day + i * HOUR);
  const seriesUrl = (world: string, query = '') => `/v1/worlds/${world}/series/Machine/m1/temperature${query}`;
  const commitOf = (res: { headers: Record<string, unknown> }) =>
    Number(String(res.headers['x-consistency-token']).replace('data=', ''));
  const write = async (world: string, points: [number, number][]) => {
    const res = await s.dataCall('POST', seriesUrl(world), {
      body: { points: points.map(([i, value]) => ({ time: at(i), value })) },
    });
    expect(res.statusCode, res.body).toBe(200);
    return commitOf(res);
  };
  /** Every point of the series as `world` reads it (hour index → value), page by page. */
  const read = async (world: string, query = '') => {
    const got: Record<number, unknown> = {};
    let next: string | null = null;
    do {
      const res = await s.dataCall('GET', seriesUrl(world, `?limit=2${query}${next ? `&cursor=${next}` : ''}`));
      expect(res.statusCode, res.body).toBe(200);
      for (const p of res.json().points as { time: string; value: unknown }[])
        got[(Date.parse(p.time) - day) / HOUR] = p.value;
      next = res.json().next;
    } while (next);
    return got;
  };
  const rollup = async (world: string, agg: string, query = '') => {
    const res = await s.dataCall('GET', seriesUrl(world, `?bucket=1d&agg=${agg}${query}`));
    expect(res.statusCode, res.body).toBe(200);
    return (res.json().points as { time: string; value: unknown }[]).map((p) => p.value);
  };
  const latest = async (world: string, query = '') => {
    const res = await s.dataCall('GET', `/v1/worlds/${world}/objects/Machine/m1${query}`);
    expect(res.statusCode, res.body).toBe(200);
    return res.json().series?.temperature as { time: string; value: unknown } | undefined;
  };
  const fork = (id: string, from: string) => forkThroughControl(s, id, from);

  const commits = { first: 0, fork: 0, baseAfter: 0, forkAfter: 0 };

  beforeAll(async () => {
    s = await dataStack();
    await s.world('sbase', { objectTypes: { Machine } });
    const put = await s.dataCall('PUT', '/v1/worlds/sbase/objects/Machine/m1', { body: { properties: { id: 'm1' } } });
    expect(put.statusCode, put.body).toBe(201);
    commits.first = await write('sbase', [
      [0, 1],
      [1, 2],
      [2, 3],
    ]);
    commits.fork = await fork('sfork', 'sbase');
    expect(commits.fork).toBeGreaterThanOrEqual(commits.first);
    // After the fork: the base adds an hour and overwrites one; the fork adds one and overwrites an inherited one.
    commits.baseAfter = await write('sbase', [
      [3, 4],
      [1, 20],
    ]);
    commits.forkAfter = await write('sfork', [
      [4, 50],
      [2, 30],
    ]);
  });
  afterAll(async () => {
    await s?.close();
  });

  it("a fork reads its base's points at the fork point and its own after, not the base's later ones", async () => {
    // Hour 1 keeps the value it had at the fork point (20 came later), hour 2 is the fork's own, hour 3 the base's later point.
    expect(await read('sfork')).toEqual({ 0: 1, 1: 2, 2: 30, 4: 50 });
    expect(await rollup('sfork', 'sum')).toEqual([1 + 2 + 30 + 50]);
    expect(await rollup('sfork', 'count')).toEqual([4]);
    expect(await rollup('sfork', 'last')).toEqual([50]);
    expect(await latest('sfork')).toEqual({ time: at(4), value: 50 });
    // A fork of the fork reads through both levels, each at its fork point.
    await fork('sgrand', 'sfork');
    await write('sfork', [[5, 60]]);
    await write('sgrand', [[0, 100]]);
    expect(await read('sgrand')).toEqual({ 0: 100, 1: 2, 2: 30, 4: 50 });
    expect(await latest('sgrand')).toEqual({ time: at(4), value: 50 });
  });

  it("the fork's own points are not visible in the base", async () => {
    expect(await read('sbase')).toEqual({ 0: 1, 1: 20, 2: 3, 3: 4 });
    expect(await rollup('sbase', 'sum')).toEqual([1 + 20 + 3 + 4]);
    expect(await latest('sbase')).toEqual({ time: at(3), value: 4 });
  });

  it('?at= reads ranges, rollups and the latest point as they were at a commit or an instant', async () => {
    // The base at its first batch: the overwritten hour answers its former value.
    expect(await read('sbase', `&at=${commits.first}`)).toEqual({ 0: 1, 1: 2, 2: 3 });
    expect(await rollup('sbase', 'sum', `&at=${commits.first}`)).toEqual([6]);
    expect(await rollup('sbase', 'max', `&at=${commits.baseAfter}`)).toEqual([20]);
    expect(await latest('sbase', `?at=${commits.first}`)).toEqual({ time: at(2), value: 3 });
    // The fork at its fork point is the base then, before its own writes.
    expect(await read('sfork', `&at=${commits.fork}`)).toEqual({ 0: 1, 1: 2, 2: 3 });
    expect(await rollup('sfork', 'avg', `&at=${commits.fork}`)).toEqual([2]);
    expect(await latest('sfork', `?at=${commits.fork}`)).toEqual({ time: at(2), value: 3 });
    // An instant between two batches resolves to the first of them: series batches count as writes.
    // Spelt by PostgreSQL: a JavaScript Date would drop its microseconds.
    const { rows } = await s.data.app.pg.query<{ instant: string }>(
      `SELECT to_char(written_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS instant
         FROM series_batches WHERE world_id = $1 AND seq = $2`,
      ['sbase', commits.first],
    );
    const instant = rows[0]?.instant as string;
    expect(await read('sbase', `&at=${encodeURIComponent(instant)}`)).toEqual({ 0: 1, 1: 2, 2: 3 });
    expect(await rollup('sbase', 'sum', `&at=${encodeURIComponent(instant)}`)).toEqual([6]);
    // A ref in the future is the object reads' 404, naming the parameter.
    const ahead = await s.dataCall('GET', seriesUrl('sbase', `?at=${commits.forkAfter + 1_000_000}`));
    expect(ahead.statusCode, ahead.body).toBe(404);
    expect(ahead.json().errors[0].path).toBe('querystring/at');
    // A cursor of a read at a ref is not accepted for another ref.
    const page = await s.dataCall('GET', seriesUrl('sbase', `?limit=1&at=${commits.first}`));
    const other = await s.dataCall(
      'GET',
      seriesUrl('sbase', `?limit=1&at=${commits.baseAfter}&cursor=${page.json().next}`),
    );
    expect(other.statusCode, other.body).toBe(400);
  });
});
