import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, type IntelligenceStack, intelligenceStack } from './stack.js';

const Machine = {
  displayName: 'Machine',
  primaryKey: 'id',
  properties: {
    id: { type: 'string', required: true },
    limit: { type: 'double' },
    temperature: { type: { type: 'series', value: 'double' }, unit: 'degC' },
    mode: { type: { type: 'series', value: { type: 'enum', values: ['idle', 'busy'] } } },
  },
};
const W = 'windows';
const HOUR = 3_600_000;

describe('derived properties and rules over windows of time series (docs/adr/0028)', () => {
  let s: IntelligenceStack;

  beforeAll(async () => {
    s = await intelligenceStack({ intelligenceEnv: { CONSISTENCY_WAIT_MS: '20000' } });
    await s.world(W, { objectTypes: { Machine } });
  }, 120_000);
  afterAll(async () => s?.close());

  const points = async (pk: string, list: [number, number][]) => {
    const res = await s.dataCall('POST', `/v1/worlds/${W}/series/Machine/${pk}/temperature`, {
      body: { points: list.map(([t, value]) => ({ time: new Date(t).toISOString(), value })) },
    });
    expect(res.statusCode, res.body).toBe(200);
  };
  const derived = async (pk: string) => {
    const res = await s.intelCall('GET', `/v1/worlds/${W}/objects/Machine/${pk}`);
    return res.statusCode === 200 ? (res.json().derived as Record<string, { value: unknown }>) : undefined;
  };
  const until = (pk: string, name: string, value: unknown) =>
    s.until(`${pk} ${name} = ${JSON.stringify(value)}`, async () =>
      (await derived(pk))?.[name]?.value === value ? true : undefined,
    );

  it('computes a window ending at the latest point, recomputes as points arrive, and raises an alert', async () => {
    const put = await s.dataCall('PUT', `/v1/worlds/${W}/objects/Machine/m1`, {
      body: { properties: { id: 'm1', limit: 80 } },
    });
    expect(put.statusCode, put.body).toBe(201);
    const base = Date.UTC(2026, 0, 1);
    // Two hours of points, one every 10 minutes: 50, 52, …, 74.
    const first: [number, number][] = Array.from({ length: 13 }, (_, i) => [base + i * 600_000, 50 + 2 * i]);
    await points('m1', first);

    const defined = await s.intelCall('PUT', `/v1/worlds/${W}/derived-properties/avgTemp`, {
      body: {
        objectType: 'Machine',
        expression: 'agg.avg1h',
        aggregates: { avg1h: { function: 'avg', series: 'temperature', window: '1h' } },
      },
    });
    expect(defined.statusCode, defined.body).toBeLessThan(300);
    const counted = await s.intelCall('PUT', `/v1/worlds/${W}/derived-properties/samples`, {
      body: {
        objectType: 'Machine',
        expression: 'agg.n',
        aggregates: { n: { function: 'count', series: 'temperature', window: '30m' } },
      },
    });
    expect(counted.statusCode, counted.body).toBeLessThan(300);
    const rule = await s.intelCall('PUT', `/v1/worlds/${W}/rules/overheating`, {
      body: {
        objectType: 'Machine',
        condition: 'derived.avgTemp > self.limit',
        alertType: 'machine.hot',
        severity: 'critical',
      },
    });
    expect(rule.statusCode, rule.body).toBe(201);

    // The window (last - 1h, last]: the points after 01:00, 01:10 … 02:00.
    const inWindow = (list: [number, number][]) => {
      const last = Math.max(...list.map(([t]) => t));
      const kept = list.filter(([t]) => t > last - HOUR).map(([, v]) => v);
      return kept.reduce((a, b) => a + b, 0) / kept.length;
    };
    await until('m1', 'avgTemp', inWindow(first));
    await until('m1', 'samples', 3);
    const open = async () => {
      const res = await s.intelCall('GET', `/v1/worlds/${W}/alerts?objectType=Machine&pk=m1`);
      return (res.json().alerts as { status: string; alertType: string }[]).filter((a) => a.status === 'OPEN');
    };
    expect(await open()).toEqual([]);

    // Hotter points move the window on: its average passes the limit and the rule fires.
    const hot: [number, number][] = Array.from({ length: 6 }, (_, i) => [base + (13 + i) * 600_000, 95]);
    await points('m1', hot);
    const all = [...first, ...hot];
    await until('m1', 'avgTemp', inWindow(all));
    expect(inWindow(all)).toBeGreaterThan(80);
    await s.until('the overheating alert', async () => ((await open()).length === 1 ? true : undefined));
    expect((await open())[0]).toMatchObject({ alertType: 'machine.hot' });
  });

  it('keeps only the points a window can reach: older ones are trimmed on ingest, aggregates unchanged', async () => {
    // avgTemp (1h) and samples (30m) read temperature: its points are kept for 1h + the margin (1 day).
    const put = await s.dataCall('PUT', `/v1/worlds/${W}/objects/Machine/m2`, {
      body: { properties: { id: 'm2', limit: 1000 } },
    });
    expect(put.statusCode, put.body).toBe(201);
    const base = Date.UTC(2026, 1, 1);
    const STEP = 20 * 60_000;
    // Three days of points, one every 20 minutes: the value is the point's index.
    const days: [number, number][] = Array.from({ length: 3 * 72 + 1 }, (_, i) => [base + i * STEP, i]);
    for (let i = 0; i < days.length; i += 100) await points('m2', days.slice(i, i + 100));
    const last = base + (days.length - 1) * STEP;
    const intel = s.intelligence?.app;
    if (!intel) throw new Error('no intelligence');
    const kept = async () =>
      (
        await intel.pg.query<{ n: number; oldest: Date }>(
          `SELECT count(*)::int AS n, min(time) AS oldest FROM rm_series_points
            WHERE world_id = $1 AND type = 'Machine' AND pk = 'm2' AND series = 'temperature'`,
          [W],
        )
      ).rows[0];
    // (last - 1h, last]: the last three points, 214, 215, 216.
    await until('m2', 'avgTemp', 215);
    await until('m2', 'samples', 2);
    const horizon = last - HOUR - 24 * HOUR;
    const expected = days.filter(([t]) => t >= horizon).length;
    expect(await kept()).toEqual({ n: expected, oldest: new Date(horizon) });

    // A late point older than every window is taken, then trimmed; nothing it could change changes.
    await points('m2', [[base + STEP / 2, 10_000]]);
    await points('m2', [[last + STEP, 217]]);
    await until('m2', 'avgTemp', 216);
    expect((await kept())?.n).toBe(expected + 1 - 1); // the new last point in, the oldest kept one out
    expect((await kept())?.oldest).toEqual(new Date(horizon + STEP));
    expect((await derived('m2'))?.samples?.value).toBe(2);
  });

  it("in a fork, a window reads the base's points up to the fork point with the fork's own, not the base's later ones", async () => {
    const put = await s.dataCall('PUT', `/v1/worlds/${W}/objects/Machine/m3`, {
      body: { properties: { id: 'm3', limit: 1000 } },
    });
    expect(put.statusCode, put.body).toBe(201);
    const t = (minutes: number) => Date.UTC(2026, 2, 1) + minutes * 60_000;
    await points('m3', [
      [t(0), 10],
      [t(10), 20],
    ]);
    await until('m3', 'avgTemp', 15);
    const forked = await s.controlCall('POST', '/v1/worlds', { body: { id: 'windows-fork', from: { world: W } } });
    expect(forked.statusCode, forked.body).toBe(202);
    await s.until('windows-fork READY', async () =>
      (await s.controlCall('GET', '/v1/worlds/windows-fork')).json().status === 'READY' ? true : undefined,
    );
    const inFork = async () => {
      const res = await s.intelCall('GET', '/v1/worlds/windows-fork/objects/Machine/m3');
      return res.statusCode === 200 ? (res.json().derived as Record<string, { value: unknown }>) : undefined;
    };
    // The base moves on after the fork point; the fork writes a point of its own.
    await points('m3', [[t(20), 100]]);
    await until('m3', 'avgTemp', (10 + 20 + 100) / 3);
    const own = await s.dataCall('POST', '/v1/worlds/windows-fork/series/Machine/m3/temperature', {
      body: { points: [{ time: new Date(t(30)).toISOString(), value: 30 }] },
    });
    expect(own.statusCode, own.body).toBe(200);
    // 10 and 20 from the base, 30 of its own: not 30 alone, and not the base's 100.
    await s.until('the fork window over the chain', async () =>
      (await inFork())?.avgTemp?.value === 20 ? true : undefined,
    );
    expect((await derived('m3'))?.avgTemp?.value).toBe((10 + 20 + 100) / 3);
  });

  it('refuses windows over what is not a numeric series, and durations that are not ones', async () => {
    for (const [aggregates, path] of [
      [{ a: { function: 'avg', series: 'mode', window: '1h' } }, '/aggregates/a/function'],
      [{ a: { function: 'avg', series: 'limit', window: '1h' } }, '/aggregates/a/series'],
      [{ a: { function: 'avg', series: 'temperature', window: 'an hour' } }, '/aggregates/a/window'],
      [{ a: { function: 'avg', series: 'temperature', window: '1h', linkType: 'x' } }, '/aggregates/a'],
    ] as const) {
      const res = await s.intelCall('PUT', `/v1/worlds/${W}/derived-properties/bad`, {
        body: { objectType: 'Machine', expression: 'agg.a', aggregates },
      });
      expect(
        expectProblem(res, 422).errors.map((e: { path: string }) => e.path),
        JSON.stringify(aggregates),
      ).toContain(path);
    }
  });
});
