/**
 * What a valid object is, against its object type in the world's schema: the pure rules, no I/O.
 * Values are checked exactly (a boolean is not a number, 1.5 is not an integer) and every refusal
 * names the JSON path of the faulty value (`/properties/amount`). The rules for one value are
 * shared with intelligence (action parameters): @onto/shared's ontology/values.
 */
import {
  checkDate,
  checkValue,
  type FieldError,
  isPlainObject as isObject,
  normaliseInstant,
  type ObjectType,
  ownValue,
  pointer,
  setOwn,
  stringFault,
  VALUE_LIMITS,
} from '@onto/shared';

export { checkDate, normaliseInstant, pointer, stringFault };

export const LIMITS = {
  ...VALUE_LIMITS,
  /** Characters in a primary key. */
  pkLength: 512,
  /** Faults reported in one answer; the rest are summarised. */
  errors: 50,
} as const;

export type Properties = Record<string, unknown>;

class Faults {
  readonly list: FieldError[] = [];
  add(path: string, message: string) {
    this.list.push({ path, message });
  }
}

/** The primary key of the path as the value of the primary key property, or why it cannot be. */
export function pkValue(type: ObjectType, pk: string): { value: string | number } | { error: string } {
  const fault = stringFault(pk, LIMITS.pkLength);
  if (fault) return { error: `the primary key ${fault}` };
  if (pk.length === 0) return { error: 'the primary key must not be empty' };
  if (ownValue(type.properties, type.primaryKey)?.type === 'integer') {
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

// The JSON paths of schema properties under /properties, made once: every checked value is given
// its path, which was two string operations per property per object. Only names that the schema
// has are asked for, so the map stays as small as the schemas.
const paths = new Map<string, string>();
function pathOf(base: string, name: string): string {
  if (base !== '/properties') return `${base}/${pointer(name)}`;
  let path = paths.get(name);
  if (path === undefined) {
    path = `${base}/${pointer(name)}`;
    paths.set(name, path);
  }
  return path;
}

// The required properties of each object type but its primary key, listed once per type (a
// type of a schema version never changes): every check looked through all the properties.
const required = new WeakMap<ObjectType, string[]>();
function requiredOf(type: ObjectType): string[] {
  let names = required.get(type);
  if (!names) {
    names = Object.entries(type.properties)
      .filter(([name, def]) => def.required && name !== type.primaryKey)
      .map(([name]) => name);
    required.set(type, names);
  }
  return names;
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
  for (const name of Object.keys(input)) {
    const value = input[name];
    const def = Object.hasOwn(type.properties, name) ? type.properties[name] : undefined;
    if (!def) {
      faults.add(`${base}/${pointer(name)}`, `is not a property of ${type.apiName}`);
      continue;
    }
    if (value === null) continue;
    const checked = checkValue(def.type, value, pathOf(base, name), faults.list);
    if (checked !== undefined) setOwn(properties, name, checked);
  }
  const key = pkValue(type, pk);
  const pkPath = pathOf(base, type.primaryKey);
  if ('error' in key) faults.add(pkPath, key.error);
  // Own values only: a key named `constructor` absent from the body is absent, not Object.
  else if (ownValue(input, type.primaryKey) == null) setOwn(properties, type.primaryKey, key.value);
  else if (ownValue(properties, type.primaryKey) !== undefined && ownValue(properties, type.primaryKey) !== key.value) {
    faults.add(pkPath, `must equal the primary key in the path, ${JSON.stringify(pk)}`);
  }
  for (const name of requiredOf(type)) {
    if (ownValue(input, name) == null) faults.add(pathOf(base, name), 'is required');
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
    if (value === null) {
      if (Object.hasOwn(merged, name)) delete merged[name];
    }
    // A patched `__proto__` is a property (refused below as unknown), not merged's prototype.
    else setOwn(merged, name, value);
  }
  const removed = Object.entries(patch)
    .filter(([name, value]) => value === null && ownValue(type.properties, name)?.required)
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
