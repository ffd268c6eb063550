import { describe, expect, it } from 'vitest';
import { advisoryLockKey, fnv1a32, lockSpace } from '../src/db/advisory-lock.js';
import { laneOf, OUTBOX_LANES } from '../src/outbox/outbox.js';

describe('advisory-lock keys', () => {
  it('computes FNV-1a over UTF-16 code units, as published test vectors give it', () => {
    expect(fnv1a32('')).toBe(0x811c9dc5);
    expect(fnv1a32('a')).toBe(0xe40c292c);
    expect(fnv1a32('foobar')).toBe(0xbf9cf968);
  });

  it('gives the key as the signed 32-bit integer PostgreSQL takes, the same bits as the hash', () => {
    expect(advisoryLockKey('a')).toBe(0xe40c292c - 2 ** 32);
    expect(advisoryLockKey('a') >>> 0).toBe(fnv1a32('a'));
    for (const world of ['prod', 'w-1', 'Ünïcode', 'x'.repeat(200)]) {
      const key = advisoryLockKey(world);
      expect(Number.isInteger(key) && key >= -(2 ** 31) && key < 2 ** 31).toBe(true);
    }
  });

  it("is the hash the outbox's lanes are chosen by", () => {
    for (const key of ['prod/Order/o-1', 'w/x', '', 'Ünïcode/é']) expect(fnv1a32(key) % OUTBOX_LANES).toBe(laneOf(key));
  });

  it('names a lock space by four letters, as the namespaces in use were chosen', () => {
    expect(lockSpace('wrld')).toBe(0x77726c64);
    expect(lockSpace('ievl')).toBe(0x6965766c);
    expect(lockSpace('onto')).toBe(0x6f6e746f);
    expect(() => lockSpace('world')).toThrow(RangeError);
    expect(() => lockSpace('wr')).toThrow(RangeError);
  });
});
