import { createRequire } from 'node:module';
import { Partitioners } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { murmur2, partitionOfKey } from '../src/kafka/murmur2.js';

// kafkajs's own murmur2, the one its default partitioner uses.
const kafkajsMurmur2 = createRequire(import.meta.url)('kafkajs/src/producer/partitioners/default/murmur2.js') as (
  key: string | Buffer,
) => number;

/** A key of random length and characters: ASCII, Latin, CJK, astral (surrogate pairs). */
function randomKey(): string {
  const ranges = [
    [0x20, 0x7e],
    [0xa0, 0x24f],
    [0x4e00, 0x9fff],
    [0x1f300, 0x1f64f],
  ] as const;
  let key = '';
  const length = Math.floor(Math.random() * 40);
  for (let i = 0; i < length; i++) {
    const [lo, hi] = ranges[Math.random() < 0.7 ? 0 : Math.floor(Math.random() * 4)] as readonly [number, number];
    key += String.fromCodePoint(lo + Math.floor(Math.random() * (hi - lo + 1)));
  }
  return key;
}

describe('murmur2, as the Java client partitions', () => {
  it("gives the Java client's values: Kafka's own test vectors and keys checked with kafka-clients 4.1.2", () => {
    // Utils.murmur2(key.getBytes(UTF_8)) and its partition among 6, printed by kafka-clients 4.1.2.
    const java: [string, number, number][] = [
      ['21', -973932308, 0],
      ['foobar', -790332482, 0],
      ['a-little-bit-long-string', -985981536, 2],
      ['a-little-bit-longer-string', -1486304829, 5],
      ['lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8', -58897971, 5],
      ['abc', 479470107, 3],
      ['w1/Order/ü-42', -1029258745, 1],
      ['wörld/T/😀x', 601908676, 4],
      ['', 275646681, 3],
      ['a', -1563381124, 4],
      ['ab', 316155434, 2],
    ];
    for (const [key, hash, partition] of java) {
      expect(murmur2(key), key).toBe(hash);
      expect(murmur2(Buffer.from(key, 'utf8')), key).toBe(hash);
      expect(partitionOfKey(key, 6), key).toBe(partition);
    }
  });

  it("agrees with kafkajs's murmur2 and default partitioner on 20,000 random keys", () => {
    const partitioner = Partitioners.DefaultPartitioner();
    const partitionMetadata = Array.from({ length: 7 }, (_, i) => ({
      partitionId: i,
      leader: 1,
      replicas: [1],
      isr: [1],
      offlineReplicas: [],
      partitionErrorCode: 0,
    }));
    for (let i = 0; i < 20_000; i++) {
      const key = randomKey();
      expect(murmur2(key), key).toBe(kafkajsMurmur2(key));
      expect(partitionOfKey(key, 7), key).toBe(
        partitioner({ topic: 't', partitionMetadata, message: { key, value: '' } }),
      );
    }
  });
});
