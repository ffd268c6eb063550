import { describe, expect, it } from 'vitest';
import { JSON_MAX_DEPTH, jsonTooDeepAt, parseBoundedJson } from '../src/http/json-depth.js';

const nested = (depth: number, open = '[', close = ']') => `${open.repeat(depth)}${close.repeat(depth)}`;

describe('the JSON depth limit', () => {
  it('allows arrays and objects nested exactly JSON_MAX_DEPTH deep, and refuses one more level', () => {
    expect(JSON_MAX_DEPTH).toBe(64);
    expect(jsonTooDeepAt(nested(64))).toBe(-1);
    expect(jsonTooDeepAt(nested(65))).toBe(64);
    const objects = `${'{"a":'.repeat(65)}1${'}'.repeat(65)}`;
    expect(jsonTooDeepAt(objects)).toBe(5 * 64);
    expect(jsonTooDeepAt(objects, 65)).toBe(-1);
    // Siblings do not add up: depth is how far one value nests.
    expect(jsonTooDeepAt(`[${Array.from({ length: 1000 }, () => nested(60)).join(',')}]`)).toBe(-1);
  });

  it('ignores brackets inside strings, escaped quotes included', () => {
    expect(jsonTooDeepAt(JSON.stringify({ s: '['.repeat(100) }))).toBe(-1);
    expect(jsonTooDeepAt(JSON.stringify({ s: `\\"${'{'.repeat(100)}` }))).toBe(-1);
    expect(jsonTooDeepAt(`["\\\\", ${nested(64)}]`)).toBe(7 + 63);
  });

  it('parses what is within the limit and throws a SyntaxError naming the limit otherwise, before parsing', () => {
    expect(parseBoundedJson('{"a":[1,{"b":null}]}')).toEqual({ a: [1, { b: null }] });
    expect(() => parseBoundedJson(nested(100_000))).toThrow(SyntaxError);
    expect(() => parseBoundedJson(nested(100_000))).toThrow(/deeper than 64 levels/);
    // Not JSON but deep: refused for its depth without being parsed.
    expect(() => parseBoundedJson('['.repeat(70))).toThrow(/deeper than 64/);
  });
});
