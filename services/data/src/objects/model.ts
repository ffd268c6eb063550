/**
 * What a valid object is, against its object type in the world's schema: the pure rules, no I/O.
 * Values are checked exactly (a boolean is not a number, 1.5 is not an integer) and every refusal
 * names the JSON path of the faulty value (`/properties/amount`).
 */
import type { FieldError, ObjectType, PropertyType } from '@onto/shared';

export const LIMITS = {
  /** Characters (UTF-16 code units) in one string value. */
  stringLength: 65_536,
  /** Items in one array value. */
  arrayItems: 10_000,
  /** Characters in a primary key. */
  pkLength: 512,
  /** Faults reported in one answer; the rest are summarised. */
  errors: 50,
} as const;

export type Properties = Record<string, unknown>;

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** A JSON Pointer segment. */
export const pointer = (key: string) => key.replaceAll('~', '~0').replaceAll('/', '~1');

const INSTANT = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:Z|([+-])(\d{2}):(\d{2}))$/;
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
export function stringFault(s: string, max: number = LIMITS.stringLength): string | undefined {
  if (s.length > max) return `is longer than ${max} characters`;
  if (s.includes('\u0000')) return 'must not contain the NUL character';
  if (LONE_SURROGATE.test(s)) return 'must be well-formed Unicode (no lone surrogates)';
  return undefined;
}

const describe = (t: PropertyType): string => (typeof t === 'string' ? t : t.type);

class Faults {
  readonly list: FieldError[] = [];
  add(path: string, message: string) {
    this.list.push({ path, message });
  }
}

/** Checks one value against its type; returns the value as stored, or undefined after a fault. */
function checkValue(t: PropertyType, v: unknown, path: string, faults: Faults): unknown {
  const fail = (message: string) => {
    faults.add(path, message);
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
        if (!isObject(v)) return fail('must be an object {"lat": …, "lon": …}');
        const extra = Object.keys(v).filter((k) => k !== 'lat' && k !== 'lon');
        for (const k of extra) faults.add(`${path}/${pointer(k)}`, 'is not a field of a geopoint');
        const { lat, lon } = v;
        if (typeof lat !== 'number' || !(lat >= -90 && lat <= 90))
          faults.add(`${path}/lat`, 'must be a number from -90 to 90');
        if (typeof lon !== 'number' || !(lon >= -180 && lon <= 180))
          faults.add(`${path}/lon`, 'must be a number from -180 to 180');
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
      if (v.length > LIMITS.arrayItems) return fail(`must have at most ${LIMITS.arrayItems} items`);
      const before = faults.list.length;
      const out = v.map((item, i) => checkValue(t.items, item, `${path}/${i}`, faults));
      return faults.list.length === before ? out : undefined;
    }
    case 'struct': {
      if (!isObject(v)) return fail('must be an object');
      const before = faults.list.length;
      const out: Record<string, unknown> = {};
      for (const [key, value] of Object.entries(v)) {
        const field = t.fields[key];
        if (field === undefined || !Object.hasOwn(t.fields, key)) {
          faults.add(`${path}/${pointer(key)}`, 'is not a field of this struct');
          continue;
        }
        out[key] = checkValue(field, value, `${path}/${pointer(key)}`, faults);
      }
      return faults.list.length === before ? out : undefined;
    }
  }
}

/** The primary key of the path as the value of the primary key property, or why it cannot be. */
export function pkValue(type: ObjectType, pk: string): { value: string | number } | { error: string } {
  const fault = stringFault(pk, LIMITS.pkLength);
  if (fault) return { error: `the primary key ${fault}` };
  if (pk.length === 0) return { error: 'the primary key must not be empty' };
  if (type.properties[type.primaryKey]?.type === 'integer') {
    const n = Number(pk);
    if (!/^-?(0|[1-9][0-9]*)$/.test(pk) || !Number.isSafeInteger(n)) {
      return { error: `the primary key of ${type.apiName} is an integer; ${JSON.stringify(pk)} is not one` };
    }
    return { value: n };
  }
  return { value: pk };
}

export interface Checked {
  properties: Properties;
  errors: FieldError[];
}

/**
 * Checks a whole object for `PUT` (or the result of a `PATCH`): known properties only, each of
 * its type, the required ones present, the primary key equal to the path's (filled from the
 * path when absent). `null` means "no value": allowed for optional properties only, not stored.
 */
export function checkObject(type: ObjectType, input: unknown, pk: string, base = '/properties'): Checked {
  const faults = new Faults();
  const properties: Properties = {};
  if (!isObject(input)) {
    faults.add(base, 'must be an object of property values');
    return { properties, errors: faults.list };
  }
  for (const [name, value] of Object.entries(input)) {
    const path = `${base}/${pointer(name)}`;
    const def = Object.hasOwn(type.properties, name) ? type.properties[name] : undefined;
    if (!def) {
      faults.add(path, `is not a property of ${type.apiName}`);
      continue;
    }
    if (value === null) continue;
    const checked = checkValue(def.type, value, path, faults);
    if (checked !== undefined) properties[name] = checked;
  }
  const key = pkValue(type, pk);
  const pkPath = `${base}/${pointer(type.primaryKey)}`;
  if ('error' in key) faults.add(pkPath, key.error);
  else if (!(type.primaryKey in input) || input[type.primaryKey] === null) properties[type.primaryKey] = key.value;
  else if (properties[type.primaryKey] !== undefined && properties[type.primaryKey] !== key.value) {
    faults.add(pkPath, `must equal the primary key in the path, ${JSON.stringify(pk)}`);
  }
  for (const [name, def] of Object.entries(type.properties)) {
    const given = input[name];
    if (def.required && name !== type.primaryKey && (given === undefined || given === null)) {
      faults.add(`${base}/${pointer(name)}`, 'is required');
    }
  }
  return { properties, errors: faults.list };
}

/**
 * A merge patch of the top-level properties (RFC 7396 at one level): a value replaces the
 * property (a struct or array as a whole), `null` removes it. The result is checked as a whole.
 */
export function applyPatch(type: ObjectType, stored: Properties, patch: unknown, pk: string): Checked {
  if (!isObject(patch))
    return { properties: {}, errors: [{ path: '/properties', message: 'must be an object of property values' }] };
  const merged: Properties = { ...stored };
  for (const [name, value] of Object.entries(patch)) {
    if (value === null) delete merged[name];
    else merged[name] = value;
  }
  const removed = Object.entries(patch)
    .filter(([name, value]) => value === null && type.properties[name]?.required)
    .map(([name]) => `/properties/${pointer(name)}`);
  const checked = checkObject(type, merged, pk);
  checked.errors = [
    ...checked.errors.filter((e) => !removed.includes(e.path)),
    ...removed.map((path) => ({ path, message: 'is required and cannot be removed' })),
  ];
  return checked;
}

/** At most LIMITS.errors faults, the rest counted in the last. */
export function capped(errors: FieldError[]): FieldError[] {
  if (errors.length <= LIMITS.errors) return errors;
  return [
    ...errors.slice(0, LIMITS.errors - 1),
    { path: '/', message: `and ${errors.length - LIMITS.errors + 1} more faults` },
  ];
}

// ------------------------------------------------------------------ list filters

export const FILTER_OPS = ['eq', 'gt', 'gte', 'lt', 'lte'] as const;
export type FilterOp = (typeof FILTER_OPS)[number];
export const SQL_OPS: Record<FilterOp, string> = { eq: '=', gt: '>', gte: '>=', lt: '<', lte: '<=' };

/** Types whose values have an order that the stored JSON keeps (strings as stored, numbers). */
const ORDERED = new Set(['string', 'integer', 'double', 'timestamp', 'date', 'enum']);

export interface Filter {
  property: string;
  op: FilterOp;
  /** The value as stored JSON. */
  value: unknown;
  /** jsonb_typeof of values it can match, for range operators. */
  jsonType: 'string' | 'number' | 'boolean';
}

/** `amount:gte:10` → a filter on an indexed property, with the value typed as stored. */
export function parseFilter(type: ObjectType, raw: string): Filter | { error: string } {
  const first = raw.indexOf(':');
  const second = raw.indexOf(':', first + 1);
  if (first < 0 || second < 0) return { error: 'must be <property>:<eq|gt|gte|lt|lte>:<value>' };
  const property = raw.slice(0, first);
  const op = raw.slice(first + 1, second) as FilterOp;
  const text = raw.slice(second + 1);
  const def = Object.hasOwn(type.properties, property) ? type.properties[property] : undefined;
  if (!def) return { error: `${JSON.stringify(property)} is not a property of ${type.apiName}` };
  if (!def.indexed) return { error: `${property} is not indexed; only indexed properties can be filtered on` };
  if (!FILTER_OPS.includes(op)) return { error: `unknown operator ${JSON.stringify(op)}; use eq, gt, gte, lt or lte` };
  const kind = typeof def.type === 'string' ? def.type : def.type.type;
  if (op !== 'eq' && !ORDERED.has(kind)) return { error: `${property} is a ${kind}: only eq applies` };
  const fault = stringFault(text, 1000);
  if (fault) return { error: `the value ${fault}` };
  switch (kind) {
    case 'integer':
    case 'double': {
      const n = Number(text);
      if (!/^-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?$/.test(text) || !Number.isFinite(n)) {
        return { error: `${property} is a number; ${JSON.stringify(text)} is not` };
      }
      return { property, op, value: n, jsonType: 'number' };
    }
    case 'boolean':
      if (text !== 'true' && text !== 'false') return { error: `${property} is a boolean: true or false` };
      return { property, op, value: text === 'true', jsonType: 'boolean' };
    case 'timestamp': {
      const r = normaliseInstant(text);
      return 'error' in r ? { error: `${property} ${r.error}` } : { property, op, value: r.value, jsonType: 'string' };
    }
    case 'date': {
      const bad = checkDate(text);
      return bad ? { error: `${property} ${bad}` } : { property, op, value: text, jsonType: 'string' };
    }
    case 'string':
    case 'enum':
      return { property, op, value: text, jsonType: 'string' };
    default:
      return { error: `${property} is a ${kind}: it cannot be filtered on` };
  }
}
