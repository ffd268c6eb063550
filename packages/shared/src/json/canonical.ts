/**
 * Canonical JSON: object keys sorted (by code unit), no insignificant white space, non-ASCII
 * characters kept as they are. Two equal values always give the same bytes, so bodies can be
 * compared and hashed. Values JSON cannot carry (undefined, NaN, functions, bigint) are refused.
 */
export function canonicalJson(value: unknown): string {
  try {
    return write(value);
  } catch (error) {
    if (error !== UNWRITABLE) throw error;
    // Looked for again, tracking where it is, only to name the value that cannot be written.
    throw new TypeError(locate(value, '$') ?? '$: cannot be written as JSON');
  }
}

const UNWRITABLE = new Error('unwritable');

// The common path: no location kept (every field's path was a string built and dropped).
function write(value: unknown): string {
  if (value === null) return 'null';
  switch (typeof value) {
    case 'string':
      return JSON.stringify(value);
    case 'boolean':
      return value ? 'true' : 'false';
    case 'number':
      if (!Number.isFinite(value)) throw UNWRITABLE;
      return JSON.stringify(value);
    case 'object': {
      if (Array.isArray(value)) {
        let out = '[';
        for (let i = 0; i < value.length; i++) out += (i === 0 ? '' : ',') + write(value[i]);
        return `${out}]`;
      }
      if (value instanceof Date) return JSON.stringify(value.toISOString());
      const record = value as Record<string, unknown>;
      let out = '{';
      let first = true;
      for (const key of Object.keys(record).sort()) {
        const v = record[key];
        if (v === undefined) continue; // as JSON.stringify does: an absent field
        out += `${first ? '' : ','}${JSON.stringify(key)}:${write(v)}`;
        first = false;
      }
      return `${out}}`;
    }
    default:
      throw UNWRITABLE;
  }
}

/** Where in `value` the first value JSON cannot carry is, and why, in the order write meets it. */
function locate(value: unknown, path: string): string | undefined {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return undefined;
    case 'number':
      return Number.isFinite(value) ? undefined : `${path}: ${value} cannot be written as JSON`;
    case 'object': {
      if (value === null || value instanceof Date) return undefined;
      if (Array.isArray(value)) {
        for (let i = 0; i < value.length; i++) {
          const found = locate(value[i], `${path}[${i}]`);
          if (found) return found;
        }
        return undefined;
      }
      const record = value as Record<string, unknown>;
      for (const key of Object.keys(record).sort()) {
        const v = record[key];
        const found = v === undefined ? undefined : locate(v, `${path}.${key}`);
        if (found) return found;
      }
      return undefined;
    }
    default:
      return `${path}: a ${typeof value} cannot be written as JSON`;
  }
}
