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
