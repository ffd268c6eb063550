/**
 * Canonical JSON: object keys sorted (by code unit), no insignificant white space, non-ASCII
 * characters kept as they are. Two equal values always give the same bytes, so bodies can be
 * compared and hashed. Values JSON cannot carry (undefined, NaN, functions, bigint) are refused.
 */
export function canonicalJson(value: unknown): string {
  return write(value, '$');
}

function write(value: unknown, path: string): string {
  if (value === null) return 'null';
  switch (typeof value) {
    case 'string':
      return JSON.stringify(value);
    case 'boolean':
      return value ? 'true' : 'false';
    case 'number':
      if (!Number.isFinite(value)) throw new TypeError(`${path}: ${value} cannot be written as JSON`);
      return JSON.stringify(value);
    case 'object': {
      if (Array.isArray(value)) return `[${value.map((v, i) => write(v, `${path}[${i}]`)).join(',')}]`;
      if (value instanceof Date) return JSON.stringify(value.toISOString());
      const keys = Object.keys(value).sort();
      const parts: string[] = [];
      for (const key of keys) {
        const v = (value as Record<string, unknown>)[key];
        if (v === undefined) continue; // as JSON.stringify does: an absent field
        parts.push(`${JSON.stringify(key)}:${write(v, `${path}.${key}`)}`);
      }
      return `{${parts.join(',')}}`;
    }
    default:
      throw new TypeError(`${path}: a ${typeof value} cannot be written as JSON`);
  }
}
