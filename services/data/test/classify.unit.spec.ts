import { describe, expect, it } from 'vitest';
import { choose, classifyLink, classifyObject, newer, resolveObject, type State } from '../src/merges/classify.js';

/** The seven-case table per property (docs/adr/0037), each row in both directions. */
describe('merge classification', () => {
  const base = { id: 'o1', amount: 10, status: 'open' };

  /** classifyObject(base, x, y) and with the sides swapped: the same merge seen from the other world. */
  const both = (b: State, source: State, target: State) => ({
    forward: classifyObject(b, source, target),
    swapped: classifyObject(b, target, source),
  });

  it('unchanged on both sides: the target stays', () => {
    const { forward, swapped } = both(base, base, base);
    expect(forward).toEqual({ merged: base, conflicts: [] });
    expect(swapped).toEqual({ merged: base, conflicts: [] });
  });

  it('changed on one side only: that side is taken, whichever it is', () => {
    const changed = { ...base, amount: 11 };
    const { forward, swapped } = both(base, changed, base);
    expect(forward).toEqual({ merged: changed, conflicts: [] });
    expect(swapped).toEqual({ merged: changed, conflicts: [] });
  });

  it('both changed a property alike: no conflict', () => {
    const changed = { ...base, amount: 11 };
    expect(classifyObject(base, changed, { ...changed })).toEqual({ merged: changed, conflicts: [] });
  });

  it('both changed one property differently: MODIFY_MODIFY on that property, the target kept until settled', () => {
    const { forward, swapped } = both(base, { ...base, amount: 11 }, { ...base, amount: 12 });
    expect(forward.conflicts).toEqual([
      { type: 'MODIFY_MODIFY', property: 'amount', base: 10, source: 11, target: 12 },
    ]);
    expect(forward.merged).toEqual({ ...base, amount: 12 });
    expect(swapped.conflicts).toEqual([
      { type: 'MODIFY_MODIFY', property: 'amount', base: 10, source: 12, target: 11 },
    ]);
    expect(swapped.merged).toEqual({ ...base, amount: 11 });
  });

  it('the two sides changing different properties is no conflict: both changes are kept', () => {
    const { forward, swapped } = both(base, { ...base, amount: 11 }, { ...base, status: 'paid' });
    expect(forward).toEqual({ merged: { id: 'o1', amount: 11, status: 'paid' }, conflicts: [] });
    expect(swapped).toEqual({ merged: { id: 'o1', amount: 11, status: 'paid' }, conflicts: [] });
  });

  it('a property removed on one side and changed on the other conflicts; removed on one side only is removed', () => {
    const { id, amount } = base;
    expect(classifyObject(base, { id, amount }, base)).toEqual({ merged: { id, amount }, conflicts: [] });
    const c = classifyObject(base, { id, amount }, { ...base, status: 'paid' });
    expect(c.conflicts).toEqual([
      { type: 'MODIFY_MODIFY', property: 'status', base: 'open', source: null, target: 'paid' },
    ]);
  });

  it('added in one side: added, both directions', () => {
    const { forward, swapped } = both(null, base, null);
    expect(forward).toEqual({ merged: base, conflicts: [] });
    expect(swapped).toEqual({ merged: base, conflicts: [] });
  });

  it('deleted on one side, the other unchanged: deleted, both directions', () => {
    const { forward, swapped } = both(base, null, base);
    expect(forward).toEqual({ merged: null, conflicts: [] });
    expect(swapped).toEqual({ merged: null, conflicts: [] });
  });

  it('deleted on both sides: deleted, no conflict', () => {
    expect(classifyObject(base, null, null)).toEqual({ merged: null, conflicts: [] });
  });

  it('changed on one side, deleted on the other: MODIFY_DELETE on the object, both directions', () => {
    const changed = { ...base, amount: 11 };
    const { forward, swapped } = both(base, changed, null);
    expect(forward.conflicts).toEqual([{ type: 'MODIFY_DELETE', base, source: changed, target: null }]);
    expect(forward.merged).toBeNull();
    expect(swapped.conflicts).toEqual([{ type: 'MODIFY_DELETE', base, source: null, target: changed }]);
    expect(swapped.merged).toEqual(changed);
  });

  it('added on both sides: compared per property against an empty base', () => {
    const c = classifyObject(null, { id: 'n', amount: 1, status: 'a' }, { id: 'n', amount: 2, note: 'x' });
    expect(c.conflicts).toEqual([{ type: 'MODIFY_MODIFY', property: 'amount', base: null, source: 1, target: 2 }]);
    expect(c.merged).toEqual({ id: 'n', amount: 2, status: 'a', note: 'x' });
    expect(classifyObject(null, { id: 'n', a: 1 }, { id: 'n', a: 1 })).toEqual({
      merged: { id: 'n', a: 1 },
      conflicts: [],
    });
  });

  it('values compare by content, not key order; absent and null are the same', () => {
    const s = { id: 'o1', v: { a: 1, b: 2 } };
    const t = { id: 'o1', v: { b: 2, a: 1 } };
    expect(classifyObject({ id: 'o1' }, s, t).conflicts).toEqual([]);
    expect(classifyObject({ id: 'o1', x: null }, { id: 'o1' }, { id: 'o1', x: 1 })).toEqual({
      merged: { id: 'o1', x: 1 },
      conflicts: [],
    });
  });

  it('links: live or not, taken from the side that changed, both directions', () => {
    for (const [b, s, t, merged] of [
      [false, false, false, false],
      [false, true, false, true], // added in the source
      [false, false, true, true], // added in the target
      [true, false, true, false], // deleted in the source
      [true, true, false, false], // deleted in the target
      [false, true, true, true], // added on both
      [true, false, false, false], // deleted on both
      [true, true, true, true],
    ] as const) {
      expect(classifyLink(b, s, t)).toBe(merged);
      expect(classifyLink(b, t, s)).toBe(merged);
    }
  });
});

describe('merge strategies', () => {
  it('SOURCE_WINS and TARGET_WINS pick their side; MANUAL leaves it open', () => {
    expect(choose('SOURCE_WINS')).toEqual({ take: 'source' });
    expect(choose('TARGET_WINS')).toEqual({ take: 'target' });
    expect(choose('MANUAL')).toBeNull();
  });

  it('TIMESTAMP_WINS: the newer change; an equal instant goes to the greater data seq', () => {
    const at = (micros: number, seq: number) => ({ micros, seq });
    expect(choose('TIMESTAMP_WINS', { source: at(2, 1), target: at(1, 9) })).toEqual({ take: 'source' });
    expect(choose('TIMESTAMP_WINS', { source: at(1, 9), target: at(2, 1) })).toEqual({ take: 'target' });
    expect(newer(at(5, 10), at(5, 11))).toBe('target');
    expect(newer(at(5, 11), at(5, 10))).toBe('source');
    expect(newer(null, at(1, 1))).toBe('target');
    expect(newer(at(1, 1), null)).toBe('source');
  });

  it('settling: a property conflict sets the property, a whole-object conflict decides the object', () => {
    const b = { id: 'o1', a: 1, c: 1 };
    const s = { id: 'o1', a: 2, c: 2 };
    const t = { id: 'o1', a: 3, c: 3 };
    const { merged, conflicts } = classifyObject(b, s, t);
    const settled = (choices: Parameters<typeof resolveObject>[3]) => resolveObject(merged, s, t, choices);
    const [ca, cc] = conflicts;
    expect(
      settled([
        { type: 'MODIFY_MODIFY', property: ca?.property, choice: { take: 'source' } },
        { type: 'MODIFY_MODIFY', property: cc?.property, choice: { take: 'value', value: 9 } },
      ]),
    ).toEqual({ id: 'o1', a: 2, c: 9 });
    expect(settled([{ type: 'MODIFY_MODIFY', property: 'a', choice: { take: 'value', value: null } }])).toEqual({
      id: 'o1',
      c: 3,
    });
    expect(settled([{ type: 'MODIFY_MODIFY', property: 'a', choice: null }])).toEqual(t);
    const gone = classifyObject(b, null, t);
    expect(resolveObject(gone.merged, null, t, [{ type: 'MODIFY_DELETE', choice: { take: 'source' } }])).toBeNull();
    expect(resolveObject(gone.merged, null, t, [{ type: 'MODIFY_DELETE', choice: { take: 'target' } }])).toEqual(t);
    expect(
      resolveObject(gone.merged, null, t, [{ type: 'MODIFY_DELETE', choice: { take: 'value', value: { id: 'o1' } } }]),
    ).toEqual({ id: 'o1' });
    expect(resolveObject(merged, s, t, [{ type: 'SCHEMA_CONFLICT', choice: { take: 'source' } }])).toEqual(s);
  });
});
