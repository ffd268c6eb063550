import { describe, expect, it } from 'vitest';
import { type Lineage, mergeBase, type Point } from '../src/merges/base.js';

const p = (world: string, dataSeq: number, schemaVersion = 1, definitions = 0): Point => ({
  world,
  schemaVersion,
  dataSeq,
  definitions,
});
const lineage = (forks: [string, Point][], merges: { source: Point; result: Point }[] = []): Lineage => ({
  forks: new Map(forks),
  merges,
});

describe('merge base (ADR 37)', () => {
  it('is empty for two worlds that share no history', () => {
    expect(mergeBase(lineage([]), 'a', 'b')).toBeNull();
  });

  it('is the fork point, whichever way round, with the whole vector', () => {
    const l = lineage([['staging', p('prod', 10, 3, 7)]]);
    expect(mergeBase(l, 'staging', 'prod')).toEqual(p('prod', 10, 3, 7));
    expect(mergeBase(l, 'prod', 'staging')).toEqual(p('prod', 10, 3, 7));
  });

  it('is the common fork point of two siblings, and of a grandchild and its uncle', () => {
    const l = lineage([
      ['a', p('prod', 10)],
      ['b', p('prod', 20)],
      ['a1', p('a', 30)],
    ]);
    expect(mergeBase(l, 'a', 'b')).toEqual(p('prod', 10));
    expect(mergeBase(l, 'a1', 'b')).toEqual(p('prod', 10));
    expect(mergeBase(l, 'a1', 'prod')).toEqual(p('prod', 10));
    expect(mergeBase(l, 'a1', 'a')).toEqual(p('a', 30));
  });

  it('moves to the source point of a repeated merge', () => {
    const l = lineage([['staging', p('prod', 10)]], [{ source: p('staging', 50, 4), result: p('prod', 60, 5) }]);
    expect(mergeBase(l, 'staging', 'prod')).toEqual(p('staging', 50, 4));
    // A third merge after a second one takes the newest.
    l.merges.push({ source: p('staging', 80, 6), result: p('prod', 90, 7) });
    expect(mergeBase(l, 'staging', 'prod')).toEqual(p('staging', 80, 6));
  });

  it("a merge from a common parent into one side keeps the other side's fork point", () => {
    // A merge into the source does not make the target its ancestor unless the target was the source.
    const l = lineage(
      [
        ['a', p('prod', 10)],
        ['b', p('prod', 20)],
      ],
      [{ source: p('prod', 30), result: p('a', 40) }],
    );
    expect(mergeBase(l, 'a', 'b')).toEqual(p('prod', 20));
  });

  it('works back and forth: the last merge in either direction is the base', () => {
    const l = lineage([['staging', p('prod', 10)]], [{ source: p('staging', 50), result: p('prod', 60) }]);
    // prod → staging after staging → prod: prod's point read by the first merge is its result.
    expect(mergeBase(l, 'prod', 'staging')).toEqual(p('staging', 50));
    l.merges.push({ source: p('prod', 70), result: p('staging', 75) });
    expect(mergeBase(l, 'staging', 'prod')).toEqual(p('prod', 70));
    expect(mergeBase(l, 'prod', 'staging')).toEqual(p('prod', 70));
  });

  it('takes the newest candidate of a criss-cross', () => {
    const l = lineage(
      [
        ['a', p('prod', 10)],
        ['b', p('prod', 11)],
      ],
      [
        { source: p('a', 20), result: p('b', 31) },
        { source: p('b', 22), result: p('a', 30) },
      ],
    );
    // Candidates: a@20 (b got it), b@22 (a got it), prod@11: the newest is b@22.
    expect(mergeBase(l, 'a', 'b')).toEqual(p('b', 22));
    expect(mergeBase(l, 'b', 'a')).toEqual(p('b', 22));
  });

  it('follows merges through intermediate worlds', () => {
    const l = lineage(
      [
        ['a', p('prod', 10)],
        ['c', p('prod', 5)],
      ],
      [
        { source: p('a', 20), result: p('prod', 25) },
        { source: p('prod', 26), result: p('c', 27) },
      ],
    );
    // c received prod at 26, which had a at 20.
    expect(mergeBase(l, 'a', 'c')).toEqual(p('a', 20));
  });
});
