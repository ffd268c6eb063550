import { canonicalJson } from '@onto/shared';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type Choice, classifyLink, classifyObject, resolveObject, type State } from '../src/merges/classify.js';

/*
 * Laws of the three-way merge (docs/adr/0037), checked on generated objects rather than examples:
 * an unchanged side yields the other side, a world merged into itself changes nothing, and the
 * two directions of a merge agree up to the naming of the sides.
 */

// Few property names and values, so that generated sides often touch the same property.
const name = fc.constantFrom('a', 'b', 'c', 'd', 'constructor');
const value = fc.oneof(
  fc.constantFrom(null, 0, 1, 'x', 'y', true),
  fc.array(fc.integer({ min: 0, max: 2 }), { maxLength: 2 }),
  fc.dictionary(fc.constantFrom('k', 'l'), fc.integer({ min: 0, max: 2 }), { maxKeys: 2 }),
);
const properties = fc.dictionary(name, value, { maxKeys: 5 });
const state: fc.Arbitrary<State> = fc.oneof(
  { arbitrary: properties, weight: 4 },
  { arbitrary: fc.constant(null), weight: 1 },
);

const same = (a: State, b: State) => canonicalJson(a) === canonicalJson(b);
/** Absent and null are the same value: a state's content without its null properties. */
const content = (s: State) =>
  s === null ? null : canonicalJson(Object.fromEntries(Object.entries(s).filter(([, v]) => v !== null)));

describe('merge classification laws', () => {
  it('merging with an unchanged source yields the target, with no conflict', () => {
    fc.assert(
      fc.property(state, state, (base, target) => {
        const { merged, conflicts } = classifyObject(base, base, target);
        expect(conflicts).toEqual([]);
        expect(same(merged, target)).toBe(true);
      }),
    );
  });

  it('merging with an unchanged target yields the source, with no conflict', () => {
    fc.assert(
      fc.property(state, state, (base, source) => {
        const { merged, conflicts } = classifyObject(base, source, base);
        expect(conflicts).toEqual([]);
        expect(same(merged, source)).toBe(true);
      }),
    );
  });

  it('merging a world into itself changes nothing, whatever the base', () => {
    fc.assert(
      fc.property(state, state, (base, world) => {
        const { merged, conflicts } = classifyObject(base, world, world);
        expect(conflicts).toEqual([]);
        expect(same(merged, world)).toBe(true);
      }),
    );
  });

  it('both directions find the same conflicts, with the sides swapped', () => {
    fc.assert(
      fc.property(state, state, state, (base, source, target) => {
        const forward = classifyObject(base, source, target).conflicts;
        const swapped = classifyObject(base, target, source).conflicts;
        const key = (c: { type: string; property?: string }) => `${c.type}/${c.property ?? ''}`;
        expect(forward.map(key).sort()).toEqual(swapped.map(key).sort());
        for (const c of forward) {
          const other = swapped.find((d) => key(d) === key(c));
          expect(canonicalJson([other?.source ?? null, other?.target ?? null])).toBe(
            canonicalJson([c.target ?? null, c.source ?? null]),
          );
        }
      }),
    );
  });

  it('settled for one side, both directions merge to the same content', () => {
    fc.assert(
      fc.property(state, state, state, (base, source, target) => {
        const settle = (b: State, s: State, t: State, take: Choice['take']) => {
          const { merged, conflicts } = classifyObject(b, s, t);
          const choice = { take } as Choice;
          return resolveObject(
            merged,
            s,
            t,
            conflicts.map((c) => ({ type: c.type, property: c.property, choice })),
          );
        };
        // The source winning one way is the target winning the other.
        expect(content(settle(base, source, target, 'source'))).toBe(content(settle(base, target, source, 'target')));
        expect(content(settle(base, source, target, 'target'))).toBe(content(settle(base, target, source, 'source')));
      }),
    );
  });

  it('a merge without conflict keeps every change of either side', () => {
    fc.assert(
      fc.property(state, state, state, (base, source, target) => {
        const { merged, conflicts } = classifyObject(base, source, target);
        fc.pre(conflicts.length === 0 && merged !== null && source !== null && target !== null);
        for (const side of [source, target]) {
          for (const [property, v] of Object.entries(side)) {
            const before = base === null || !Object.hasOwn(base, property) ? null : base[property];
            if (canonicalJson(v ?? null) === canonicalJson(before ?? null)) continue;
            expect(canonicalJson(Object.hasOwn(merged, property) ? merged[property] : null)).toBe(canonicalJson(v));
          }
        }
      }),
    );
  });

  it('links: an unchanged side yields the other, a world into itself changes nothing', () => {
    fc.assert(
      fc.property(fc.boolean(), fc.boolean(), (base, side) => {
        expect(classifyLink(base, base, side)).toBe(side);
        expect(classifyLink(base, side, base)).toBe(side);
        expect(classifyLink(base, side, side)).toBe(side);
      }),
    );
  });
});
