/**
 * What a valid point of a time series is, and how a query names a range and a rollup: the pure
 * rules, no I/O (docs/adr/0028). Points are checked exactly (1.5 is not an integer point) and
 * every refusal names the point's index and field (`/points/3/time`).
 */
import {
  type FieldError,
  isSeriesType,
  normaliseInstant,
  type ObjectType,
  type PropertyDef,
  retentionMs,
  type SeriesValue,
} from '@onto/shared';

export const SERIES_LIMITS = {
  /** Points in one POST of one series; more is a 413. */
  pointsPerRequest: 10_000,
  /** Points written per statement by the bulk endpoint: what it holds in memory at once. */
  bulkBatch: 5_000,
  /** Bytes of one line of the bulk endpoint: a point is small, and a line is held whole. */
  bulkLineBytes: 64 * 1024,
  /** Bytes of a bulk body: streamed a batch at a time, so bounded for time, not memory. */
  bulkBodyBytes: 1024 * 1024 * 1024,
  /** Points (or buckets) in one page of a read. */
  pageDefault: 1_000,
  pageMax: 10_000,
  /** Points carried by one series.points.written event. */
  pointsPerEvent: 1_000,
  /** Faults reported in one answer. */
  errors: 50,
} as const;

/** A point as stored: its instant (UTC, milliseconds) and either a number or an enum label. */
export interface StoredPoint {
  time: string;
  num: number | null;
  label: string | null;
}

/** A series of an object type, as the schema declares it. */
export interface SeriesDef {
  name: string;
  value: SeriesValue;
  retentionMs: number | undefined;
  unit: string | undefined;
}

export function seriesOf(type: ObjectType, name: string): SeriesDef | undefined {
  const def: PropertyDef | undefined = Object.hasOwn(type.properties, name) ? type.properties[name] : undefined;
  if (!def || !isSeriesType(def.type)) return undefined;
  return {
    name,
    value: def.type.value,
    retentionMs: def.retention === undefined ? undefined : retentionMs(def.retention),
    unit: def.unit,
  };
}

/** Every series an object type declares. */
export const seriesNamesOf = (type: ObjectType): string[] =>
  Object.entries(type.properties)
    .filter(([, def]) => isSeriesType(def.type))
    .map(([name]) => name);

const CANONICAL_INSTANT = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

const DAYS_IN_MONTH = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/** The number the digits of `s` at [from, to) spell. */
function digits(s: string, from: number, to: number): number {
  let n = 0;
  for (let i = from; i < to; i++) n = n * 10 + s.charCodeAt(i) - 48;
  return n;
}

/**
 * Whether `s` is an instant already as stored (`2026-01-31T23:59:59.000Z`, a real calendar day
 * and time of day): checked field by field, as parsing a Date per point cost a bulk body ~2 µs.
 */
function isStoredInstant(s: string): boolean {
  if (!CANONICAL_INSTANT.test(s)) return false;
  const year = digits(s, 0, 4);
  const month = digits(s, 5, 7);
  const day = digits(s, 8, 10);
  if (month < 1 || month > 12 || day < 1) return false;
  const leap = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
  const days = month === 2 && leap ? 29 : (DAYS_IN_MONTH[month - 1] as number);
  return day <= days && digits(s, 11, 13) < 24 && digits(s, 14, 16) < 60 && digits(s, 17, 19) < 60;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Checks one point `{"time", "value"}` against its series; answers it as stored, or undefined
 * after adding its faults (at `path/time`, `path/value`) to `faults`.
 */
export function checkPoint(
  series: SeriesDef,
  point: unknown,
  path: string,
  faults: FieldError[],
): StoredPoint | undefined {
  if (!isObject(point)) {
    faults.push({ path, message: 'must be {"time": "<RFC 3339>", "value": …}' });
    return undefined;
  }
  const before = faults.length;
  for (const key of Object.keys(point)) {
    if (key !== 'time' && key !== 'value')
      faults.push({ path: `${path}/${key}`, message: 'is not a field of a point' });
  }
  let time: string | undefined;
  if (typeof point.time !== 'string') faults.push({ path: `${path}/time`, message: 'must be an RFC 3339 instant' });
  else if (isStoredInstant(point.time)) {
    time = point.time; // already as stored: the common case of a bulk body, without the full parse
  } else {
    const r = normaliseInstant(point.time);
    if ('error' in r) faults.push({ path: `${path}/time`, message: r.error });
    else time = r.value;
  }
  const v = point.value;
  const valuePath = `${path}/value`;
  let num: number | null = null;
  let label: string | null = null;
  const t = series.value;
  if (t === 'double') {
    if (typeof v === 'number' && Number.isFinite(v)) num = v;
    else faults.push({ path: valuePath, message: 'must be a number' });
  } else if (t === 'integer') {
    if (typeof v === 'number' && Number.isSafeInteger(v)) num = v;
    else faults.push({ path: valuePath, message: 'must be an integer (at most 2^53 - 1 in magnitude)' });
  } else if (t === 'boolean') {
    if (typeof v === 'boolean') num = v ? 1 : 0;
    else faults.push({ path: valuePath, message: 'must be true or false' });
  } else if (typeof v === 'string' && t.values.includes(v)) label = v;
  else faults.push({ path: valuePath, message: `must be one of ${t.values.map((x) => JSON.stringify(x)).join(', ')}` });
  if (faults.length > before || time === undefined) return undefined;
  return { time, num, label };
}

/** A stored value as the series' type spells it. */
export function pointValue(series: SeriesDef, num: number | null, label: string | null): unknown {
  if (series.value === 'boolean') return num === null ? null : num !== 0;
  if (typeof series.value === 'object') return label;
  return num;
}

/** The last point of each instant wins within one batch, as it does across batches. */
export function lastPerInstant(points: StoredPoint[]): StoredPoint[] {
  const byTime = new Map<string, StoredPoint>();
  for (const p of points) {
    byTime.delete(p.time); // keeps the map in order of the last occurrence
    byTime.set(p.time, p);
  }
  return [...byTime.values()];
}

// ---------------------------------------------------------------- queries

export const AGGREGATES = ['min', 'max', 'avg', 'sum', 'count', 'last'] as const;
export type Aggregate = (typeof AGGREGATES)[number];

export const BUCKET = /^([1-9][0-9]{0,5})(s|m|h|d|w)$/;
const UNIT_MS = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 } as const;

/** A bucket width (`30s`, `1m`, `1h`, `1d`, `1w`) in milliseconds; undefined when not one. */
export function bucketMs(text: string): number | undefined {
  const m = BUCKET.exec(text);
  if (!m) return undefined;
  return Number(m[1]) * UNIT_MS[m[2] as keyof typeof UNIT_MS];
}

/** The aggregates a series of this value type answers: enum labels have no arithmetic. */
export const aggregatesFor = (series: SeriesDef): readonly Aggregate[] =>
  typeof series.value === 'object' ? ['count', 'last'] : AGGREGATES;

/** An aggregate's value as the series' type spells it: count is a count, avg a fraction of booleans. */
export function aggregateValue(series: SeriesDef, agg: Aggregate, num: number | null, label: string | null): unknown {
  if (agg === 'count') return num;
  if (agg === 'last' || agg === 'min' || agg === 'max') return pointValue(series, num, label);
  return num;
}
