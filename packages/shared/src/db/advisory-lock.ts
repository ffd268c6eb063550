/** An advisory-lock namespace named by four ASCII letters, as one 32-bit number: 'wrld' → 0x77726c64. */
export function lockSpace(name: string): number {
  if (!/^[\x20-\x7e]{4}$/.test(name)) throw new RangeError(`a lock space is named by four ASCII letters, not ${name}`);
  let space = 0;
  for (let i = 0; i < 4; i++) space = (space << 8) | name.charCodeAt(i);
  return space;
}

/** FNV-1a (32 bits, unsigned) of a string's UTF-16 code units: stable across processes and languages. */
export function fnv1a32(text: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return hash >>> 0;
}

/** A string's advisory-lock key: its FNV-1a as the signed 32-bit integer `pg_advisory_*(int, int)` takes. */
export const advisoryLockKey = (text: string): number => fnv1a32(text) | 0;
