import { describe, expect, it } from 'vitest';
import { compareWorld } from '../src/checker/checker.js';

const data = (counts: Record<string, number>, seq = 10, schemaVersion = 3) => ({
  schemaVersion,
  seq,
  counts,
  outboxOldestAgeSeconds: 0,
});
const intelligence = (
  counts: Record<string, number>,
  dataSeq = 10,
  schemaVersion = 3,
  staleDerived: string[] = [],
) => ({
  schemaVersion,
  dataSeq,
  counts,
  staleDerived,
  outboxOldestAgeSeconds: 0,
});

describe("the checker's comparison of a world's reports", () => {
  it('finds nothing when the reports agree', () => {
    expect(compareWorld('w', 3, data({ A: 5 }), intelligence({ A: 5 }), 0.01)).toEqual([]);
  });

  it('compares counts exactly once intelligence has applied what data had written', () => {
    expect(compareWorld('w', 3, data({ A: 500 }), intelligence({ A: 499 }), 0.01)).toEqual([
      {
        world: 'w',
        kind: 'count_mismatch',
        subject: 'A',
        detail: { data: 500, intelligence: 499, quiet: true },
        repair: 'objects.recount.requested',
      },
    ]);
  });

  it('allows the tolerance while writes flow, and no less than one object', () => {
    expect(compareWorld('w', 3, data({ A: 500, B: 3 }, 20), intelligence({ A: 495, B: 2 }, 12), 0.01)).toEqual([]);
    expect(compareWorld('w', 3, data({ A: 500 }, 20), intelligence({ A: 494 }, 12), 0.01)).toMatchObject([
      { kind: 'count_mismatch', subject: 'A', detail: { quiet: false } },
    ]);
  });

  it('asks for no recount when intelligence holds more than data: re-announcing cannot remove objects', () => {
    expect(compareWorld('w', 3, data({}), intelligence({ A: 1 }), 0.01)).toEqual([
      {
        world: 'w',
        kind: 'count_mismatch',
        subject: 'A',
        detail: { data: 0, intelligence: 1, quiet: true },
        repair: null,
      },
    ]);
  });

  it('compares link counts per link type, quiet by the newest link write, and asks for a link recount', () => {
    const withLinks = (links: Record<string, number>, linkSeq: number) => ({ ...data({ A: 1 }, 10), links, linkSeq });
    const intelLinks = (links: Record<string, number>, dataSeq = 30) => ({ ...intelligence({ A: 1 }, dataSeq), links });
    expect(compareWorld('w', 3, withLinks({ placed: 4 }, 30), intelLinks({ placed: 4 }), 0.01)).toEqual([]);
    expect(compareWorld('w', 3, withLinks({ placed: 4, tagged: 1 }, 30), intelLinks({ placed: 3 }), 0.01)).toEqual([
      {
        world: 'w',
        kind: 'link_count_mismatch',
        subject: 'placed',
        detail: { data: 4, intelligence: 3, quiet: true },
        repair: 'links.recount.requested',
      },
      {
        world: 'w',
        kind: 'link_count_mismatch',
        subject: 'tagged',
        detail: { data: 1, intelligence: 0, quiet: true },
        repair: 'links.recount.requested',
      },
    ]);
    // A link written after intelligence's watermark: not quiet, one link of tolerance.
    expect(compareWorld('w', 3, withLinks({ placed: 4 }, 31), intelLinks({ placed: 3 }), 0.01)).toEqual([]);
    // More links in intelligence than in data: found, not repaired.
    expect(compareWorld('w', 3, withLinks({}, 30), intelLinks({ placed: 1 }), 0.01)).toMatchObject([
      { kind: 'link_count_mismatch', subject: 'placed', repair: null },
    ]);
    // A report without link counts (an older service): links are not compared.
    expect(compareWorld('w', 3, data({ A: 1 }), intelLinks({ placed: 1 }), 0.01)).toEqual([]);
  });

  it('finds schema gaps, stale derived properties and missing reports', () => {
    expect(compareWorld('w', 4, data({}, 10, 3), intelligence({}, 10, 4, ['total']), 0.01)).toEqual([
      {
        world: 'w',
        kind: 'schema_gap',
        subject: 'data',
        detail: { control: 4, applied: 3 },
        repair: 'schema.republished',
      },
      { world: 'w', kind: 'derived_stale', subject: 'total', detail: {}, repair: 'derived.recompute.requested' },
    ]);
    expect(compareWorld('w', 4, undefined, intelligence({}, 10, 4), 0.01)).toEqual([
      { world: 'w', kind: 'unreported', subject: 'data', detail: {}, repair: null },
    ]);
  });
});
