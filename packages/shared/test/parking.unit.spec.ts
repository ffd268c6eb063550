import { describe, expect, it } from 'vitest';
import { uuidv7 } from '../src/ids/uuidv7.js';
import { partitionOf, passedHorizon, uuidv7Time } from '../src/inbox/parking.js';

const at = (topic: string, partition: number, low: string, high: string) =>
  [partitionOf(topic, partition), { partition, low, high }] as const;

describe("a parked event's horizon", () => {
  const horizon = new Map([at('a', 0, '0', '10'), at('a', 1, '5', '5'), at('b', 0, '0', '3')]);

  it("is passed once the group committed up to every partition's end, empty partitions aside", () => {
    const committed = new Map([
      [partitionOf('a', 0), '10'],
      [partitionOf('b', 0), '7'],
    ]);
    expect(passedHorizon(horizon, { ends: new Map(), committed })).toBe(true);
  });

  it('is not passed while one partition is behind its end, or was never committed', () => {
    const behind = new Map([
      [partitionOf('a', 0), '9'],
      [partitionOf('b', 0), '3'],
    ]);
    expect(passedHorizon(horizon, { ends: new Map(), committed: behind })).toBe(false);
    const never = new Map([[partitionOf('a', 0), '10']]);
    expect(passedHorizon(horizon, { ends: new Map(), committed: never })).toBe(false);
  });
});

describe('uuidv7Time', () => {
  it('reads the millisecond a UUIDv7 was drawn, and nothing from another version', () => {
    expect(uuidv7Time(uuidv7(1_700_000_000_123))).toBe(1_700_000_000_123);
    expect(uuidv7Time('123e4567-e89b-12d3-a456-426614174000')).toBeUndefined();
  });
});
