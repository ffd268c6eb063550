import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { compile, evaluate, evaluateCondition, type Program, propertiesToCel } from '../src/cel/expressions.js';

/** CEL evaluation alone (docs/adr/0021): no Kafka, no PostgreSQL. */
const program = (source: string): Program => {
  const c = compile(source, ['self', 'derived', 'agg', 'alert']);
  if (!c.ok) throw new Error(c.message);
  return c.program;
};
const types = { n: { type: 'integer' as const }, x: { type: 'double' as const }, s: { type: 'string' as const } };

describe('CEL evaluation', () => {
  it('integers stay integers and doubles doubles, as the property types say', () => {
    const self = propertiesToCel({ n: 7, x: 7, s: 'a' }, types);
    expect(evaluate(program('self.n / 2'), { self })).toEqual({ value: 3, kind: 'int' });
    expect(evaluate(program('self.x / 2.0'), { self })).toEqual({ value: 3.5, kind: 'double' });
    expect(evaluate(program("self.s + 'b'"), { self })).toEqual({ value: 'ab', kind: 'string' });
    expect(evaluate(program('n * 2'), { self })).toEqual({ value: 14, kind: 'int' });
  });

  it('an error in evaluation is an outcome, never a throw', () => {
    const self = propertiesToCel({ n: 1 }, types);
    expect(evaluate(program('self.n / 0'), { self })).toMatchObject({ error: expect.stringMatching(/divi/i) });
    expect(evaluate(program('self.missing + 1'), { self })).toHaveProperty('error');
    expect(evaluateCondition(program('self.n + 1'), { self })).toEqual({
      error: 'the condition gave a int, not a bool',
    });
  });

  it('a comprehension over a huge list runs out of budget instead of holding the loop', () => {
    // Planned, a nested comprehension is refused; a single one over a long list is stopped when it runs.
    expect(compile('self.items.map(a, self.items.map(b, a + b)).size()', ['self'])).toMatchObject({ ok: false });
    const outcome = evaluate(program('self.items.map(a, a * 2).size()'), {
      self: { items: Array.from({ length: 100_000 }, (_, i) => BigInt(i)) },
    });
    expect(outcome).toMatchObject({ error: expect.stringContaining('docs/adr/0021') });
  });

  it('integer arithmetic and comparison agree with exact arithmetic within ±2^53', () => {
    const sum = program('self.a + self.b');
    const less = program('self.a < self.b');
    const safe = fc.integer({ min: -(2 ** 40), max: 2 ** 40 });
    fc.assert(
      fc.property(safe, safe, (a, b) => {
        const self = propertiesToCel({ a, b }, { a: { type: 'integer' }, b: { type: 'integer' } });
        expect(evaluate(sum, { self })).toEqual({ value: a + b, kind: 'int' });
        expect(evaluateCondition(less, { self })).toBe(a < b);
      }),
    );
  });

  it('an integer overflowing 64 bits is an error, not a wrapped value', () => {
    const self = propertiesToCel({ n: Number.MAX_SAFE_INTEGER }, types);
    expect(evaluate(program('self.n * self.n * self.n'), { self })).toHaveProperty('error');
  });

  it('strings and lists come back as the JSON they were', () => {
    fc.assert(
      fc.property(fc.string(), fc.array(fc.string(), { maxLength: 5 }), (s, list) => {
        expect(evaluate(program('self.s'), { self: { s } })).toEqual({ value: s, kind: 'string' });
        expect(evaluate(program('self.list'), { self: { list } })).toEqual({ value: list, kind: 'list' });
      }),
    );
  });
});
