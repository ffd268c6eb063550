import type { FieldError, ObjectType } from '@onto/shared';
import { describe, expect, it } from 'vitest';
import { bucketMs, checkPoint, pointValue, type SeriesDef, seriesOf } from '../src/series/model.js';

const Machine: ObjectType = {
  apiName: 'Machine',
  displayName: 'Machine',
  primaryKey: 'id',
  properties: {
    id: { type: 'string' },
    temperature: { type: { type: 'series', value: 'double' }, retention: '2d' },
    mode: { type: { type: 'series', value: { type: 'enum', values: ['idle', 'busy'] } } },
  },
};
const series = (name: string) => seriesOf(Machine, name) as SeriesDef;

describe('series points', () => {
  it('finds the series of a type, with its retention, and nothing else', () => {
    expect(series('temperature')).toMatchObject({ value: 'double', retentionMs: 2 * 86_400_000 });
    expect(seriesOf(Machine, 'id')).toBeUndefined();
    expect(seriesOf(Machine, 'toString')).toBeUndefined();
  });

  it('stores instants in UTC milliseconds, whatever their offset', () => {
    const faults: FieldError[] = [];
    const at = (time: string) => checkPoint(series('temperature'), { time, value: 1 }, '/points/0', faults)?.time;
    expect(at('2026-03-01T01:30:00+01:30')).toBe('2026-03-01T00:00:00.000Z');
    expect(at('2026-03-01T00:00:00.000Z')).toBe('2026-03-01T00:00:00.000Z');
    expect(at('2026-02-30T00:00:00.000Z')).toBeUndefined();
    expect(faults.map((f) => f.path)).toEqual(['/points/0/time']);
  });

  it('checks values by the series type and spells enum labels back', () => {
    const faults: FieldError[] = [];
    const t = '2026-03-01T00:00:00Z';
    expect(checkPoint(series('temperature'), { time: t, value: Number.NaN }, '/p', faults)).toBeUndefined();
    const busy = checkPoint(series('mode'), { time: t, value: 'busy' }, '/q', faults);
    expect(busy && pointValue(series('mode'), busy.num, busy.label)).toBe('busy');
    expect(checkPoint(series('mode'), { time: t, value: 'off' }, '/r', faults)).toBeUndefined();
    expect(faults.map((f) => f.path)).toEqual(['/p/value', '/r/value']);
  });

  it('reads bucket widths', () => {
    expect(bucketMs('1m')).toBe(60_000);
    expect(bucketMs('15m')).toBe(900_000);
    expect(bucketMs('1d')).toBe(86_400_000);
    for (const bad of ['0h', '1y', 'h', '1.5h', '-1h', '1 h']) expect(bucketMs(bad), bad).toBeUndefined();
  });
});
