/**
 * What a valid value of a property type is: the pure rules, no I/O. data checks object
 * properties with them, intelligence the parameters of an action. Values are checked exactly
 * (a boolean is not a number, 1.5 is not an integer) and every refusal names the JSON path of
 * the faulty value (`/properties/amount`, `/parameters/qty`).
 */

import type { FieldError } from '../errors/problem.js';
import { setOwn } from './own.js';
import type { PropertyType } from './schema.js';

export const VALUE_LIMITS = {
  /** Characters (UTF-16 code units) in one string value. */
  stringLength: 65_536,
  /** Items in one array value. */
  arrayItems: 10_000,
} as const;

export const isPlainObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/** A JSON Pointer segment. */
export const pointer = (key: string) => key.replaceAll('~', '~0').replaceAll('/', '~1');

/** An RFC 3339 instant with an offset, as normaliseInstant reads it (its ranges checked there). */
export const INSTANT = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:Z|([+-])(\d{2}):(\d{2}))$/;
const DATE = /^(\d{4})-(\d{2})-(\d{2})$/;

const leap = (y: number) => (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0;
const daysIn = (year: number, month: number) =>
  [31, leap(year) ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1] ?? 0;

/**
 * An ISO 8601 instant with an explicit offset, as UTC with milliseconds (`toISOString`): one
 * spelling per instant, so that equality and order are those of the strings (and of the index).
 * Digits beyond the millisecond must be zeros rather than silently dropped.
 */
export function normaliseInstant(text: string): { value: string } | { error: string } {
  const m = INSTANT.exec(text);
  if (!m) return { error: 'must be an ISO 8601 instant with an offset, such as 2024-05-01T12:00:00Z' };
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number) as [
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  const fraction = m[7] ?? '';
  if (month < 1 || month > 12 || day < 1 || day > daysIn(year, month) || hour > 23 || minute > 59 || second > 59) {
    return { error: 'is not a valid date and time' };
  }
  const offsetHours = Number(m[9] ?? 0);
  const offsetMinutes = Number(m[10] ?? 0);
  if (offsetHours > 23 || offsetMinutes > 59) return { error: 'has an invalid offset' };
  if (/[1-9]/.test(fraction.slice(3))) return { error: 'has more than millisecond precision' };
  const date = new Date(0);
  date.setUTCFullYear(year, month - 1, day);
  date.setUTCHours(hour, minute, second, Number(fraction.slice(0, 3).padEnd(3, '0')));
  const sign = m[8] === '-' ? -1 : 1;
  const utc = new Date(date.getTime() - sign * (offsetHours * 60 + offsetMinutes) * 60_000);
  const utcYear = utc.getUTCFullYear();
  if (utcYear < 0 || utcYear > 9999) return { error: 'is out of range (years 0000 to 9999 in UTC)' };
  return { value: utc.toISOString() };
}

export function checkDate(text: string): string | undefined {
  const m = DATE.exec(text);
  if (!m) return 'must be a date, YYYY-MM-DD';
  const [year, month, day] = m.slice(1, 4).map(Number) as [number, number, number];
  if (month < 1 || month > 12 || day < 1 || day > daysIn(year, month)) return 'is not a valid date';
  return undefined;
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Why a string cannot be stored (PostgreSQL refuses NUL and lone surrogates in text and jsonb). */
export function stringFault(s: string, max: number = VALUE_LIMITS.stringLength): string | undefined {
  if (s.length > max) return `is longer than ${max} characters`;
  if (s.includes('\u0000')) return 'must not contain the NUL character';
  if (LONE_SURROGATE.test(s)) return 'must be well-formed Unicode (no lone surrogates)';
  return undefined;
}

const describe = (t: PropertyType): string => (typeof t === 'string' ? t : t.type);

/**
 * Checks one value against its type; returns the value as stored (instants in UTC), or undefined
 * after adding its faults to `faults`.
 */
export function checkValue(t: PropertyType, v: unknown, path: string, faults: FieldError[]): unknown {
  const fail = (message: string) => {
    faults.push({ path, message });
    return undefined;
  };
  if (typeof t === 'string') {
    switch (t) {
      case 'string': {
        if (typeof v !== 'string') return fail('must be a string');
        const fault = stringFault(v);
        return fault ? fail(fault) : v;
      }
      case 'integer':
        if (typeof v !== 'number' || !Number.isInteger(v)) return fail('must be an integer');
        if (!Number.isSafeInteger(v)) return fail('must be a safe integer (at most 2^53 - 1 in magnitude)');
        return v;
      case 'double':
        return typeof v === 'number' && Number.isFinite(v) ? v : fail('must be a number');
      case 'boolean':
        return typeof v === 'boolean' ? v : fail('must be true or false');
      case 'timestamp': {
        if (typeof v !== 'string') return fail('must be an ISO 8601 instant string');
        const r = normaliseInstant(v);
        return 'error' in r ? fail(r.error) : r.value;
      }
      case 'date': {
        if (typeof v !== 'string') return fail('must be a date string, YYYY-MM-DD');
        const fault = checkDate(v);
        return fault ? fail(fault) : v;
      }
      case 'geopoint': {
        if (!isPlainObject(v)) return fail('must be an object {"lat": …, "lon": …}');
        const extra = Object.keys(v).filter((k) => k !== 'lat' && k !== 'lon');
        for (const k of extra) faults.push({ path: `${path}/${pointer(k)}`, message: 'is not a field of a geopoint' });
        const { lat, lon } = v;
        if (typeof lat !== 'number' || !(lat >= -90 && lat <= 90))
          faults.push({ path: `${path}/lat`, message: 'must be a number from -90 to 90' });
        if (typeof lon !== 'number' || !(lon >= -180 && lon <= 180))
          faults.push({ path: `${path}/lon`, message: 'must be a number from -180 to 180' });
        return extra.length === 0 && typeof lat === 'number' && typeof lon === 'number' ? { lat, lon } : undefined;
      }
    }
  }
  switch (t.type) {
    case 'enum':
      if (typeof v !== 'string' || !t.values.includes(v)) {
        return fail(
          `must be one of ${t.values
            .slice(0, 20)
            .map((x) => JSON.stringify(x))
            .join(', ')}${t.values.length > 20 ? ', …' : ''}`,
        );
      }
      return v;
    case 'array': {
      if (!Array.isArray(v)) return fail(`must be an array of ${describe(t.items)}`);
      if (v.length > VALUE_LIMITS.arrayItems) return fail(`must have at most ${VALUE_LIMITS.arrayItems} items`);
      const before = faults.length;
      const out = v.map((item, i) => checkValue(t.items, item, `${path}/${i}`, faults));
      return faults.length === before ? out : undefined;
    }
    case 'struct': {
      if (!isPlainObject(v)) return fail('must be an object');
      const before = faults.length;
      const out: Record<string, unknown> = {};
      for (const [key, value] of Object.entries(v)) {
        const field = Object.hasOwn(t.fields, key) ? t.fields[key] : undefined;
        if (field === undefined) {
          faults.push({ path: `${path}/${pointer(key)}`, message: 'is not a field of this struct' });
          continue;
        }
        setOwn(out, key, checkValue(field, value, `${path}/${pointer(key)}`, faults));
      }
      return faults.length === before ? out : undefined;
    }
    case 'series':
      return fail('is a time series: its points are written to /v1/worlds/{world}/series/{type}/{pk}/{series}');
  }
}
