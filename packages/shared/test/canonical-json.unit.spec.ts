import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { canonicalJson } from '../src/json/canonical.js';

/** Canonical JSON (docs/architecture §3): sorted keys, no spaces, non-ASCII kept; equal values, equal bytes. */
describe('canonical JSON', () => {
  const json = fc.jsonValue();

  it('is JSON that parses back to the same value', () => {
    fc.assert(
      fc.property(json, (value) => {
        expect(JSON.parse(canonicalJson(value))).toEqual(JSON.parse(JSON.stringify(value)));
      }),
    );
  });

  it('is a fixed point: written again, the same bytes', () => {
    fc.assert(
      fc.property(json, (value) => {
        const once = canonicalJson(value);
        expect(canonicalJson(JSON.parse(once))).toBe(once);
      }),
    );
  });

  it('does not depend on the order keys were written in', () => {
    fc.assert(
      fc.property(fc.dictionary(fc.string(), json), (record) => {
        const reversed = Object.fromEntries(Object.entries(record).reverse());
        expect(canonicalJson(reversed)).toBe(canonicalJson(record));
      }),
    );
  });

  it('sorts keys by code unit, has no white space and keeps non-ASCII characters', () => {
    expect(canonicalJson({ b: 1, a: [1, { d: 'é', c: '日本' }], B: null })).toBe(
      '{"B":null,"a":[1,{"c":"日本","d":"é"}],"b":1}',
    );
  });

  it('refuses what JSON cannot carry, naming where it is', () => {
    expect(() => canonicalJson({ a: [1, Number.NaN] })).toThrow('$.a[1]');
    expect(() => canonicalJson(1n)).toThrow(TypeError);
  });
});
