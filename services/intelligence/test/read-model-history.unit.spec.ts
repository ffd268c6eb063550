import { describe, expect, it } from 'vitest';
import { supersededInBatch } from '../src/readmodel/apply.js';

/** The versions a batch itself supersedes go to history with the next version's seq (docs/adr/0033). */
describe('supersededInBatch', () => {
  const key = (c: { pk: string }) => c.pk;

  it('keeps every version of a key but the newest, each superseded by the next one of the batch', () => {
    const changes = [
      { pk: 'a', version: 3, seq: 30 },
      { pk: 'b', version: 1, seq: 11 },
      { pk: 'a', version: 1, seq: 10 },
      { pk: 'a', version: 2, seq: 20 },
    ];
    expect(supersededInBatch(changes, key)).toEqual([
      { change: { pk: 'a', version: 1, seq: 10 }, supersededSeq: 20 },
      { change: { pk: 'a', version: 2, seq: 20 }, supersededSeq: 30 },
    ]);
  });

  it('keeps nothing for keys changed once, nor for a replayed duplicate', () => {
    const changes = [
      { pk: 'a', version: 1, seq: 10 },
      { pk: 'a', version: 1, seq: 10 },
      { pk: 'b', version: 4, seq: 12 },
    ];
    expect(supersededInBatch(changes, key)).toEqual([]);
  });
});
