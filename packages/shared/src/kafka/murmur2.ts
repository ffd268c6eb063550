/**
 * Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2), as the Java client and kafkajs's
 * default partitioner hash a record's key: the same 32-bit result for the same UTF-8 bytes.
 * kafkajs computes it with 64-bit Long objects, a dozen allocations per 4 bytes of key: with the
 * partitioner's per-message array, over a microsecond a key, a tenth of the relay's CPU when
 * every key is new (a bulk write). Java's int arithmetic is Math.imul and `>>>` here.
 */
const SEED = 0x9747b28c;
const M = 0x5bd1e995;

let scratch = new Uint8Array(256);

/** The key's UTF-8 bytes: an ASCII key is copied by hand into a reused buffer, others encoded. */
function bytesOf(key: string): { data: Uint8Array; length: number } {
  const n = key.length;
  if (n > scratch.length) scratch = new Uint8Array(Math.max(n, scratch.length * 2));
  for (let i = 0; i < n; i++) {
    const c = key.charCodeAt(i);
    if (c > 0x7f) {
      const data = Buffer.from(key, 'utf8');
      return { data, length: data.length };
    }
    scratch[i] = c;
  }
  return { data: scratch, length: n };
}

export function murmur2(key: string | Uint8Array): number {
  const { data, length } = typeof key === 'string' ? bytesOf(key) : { data: key, length: key.length };
  let h = SEED ^ length;
  const whole = length & ~3;
  for (let i = 0; i < whole; i += 4) {
    let k = (data[i] as number) | ((data[i + 1] as number) << 8) | ((data[i + 2] as number) << 16);
    k |= (data[i + 3] as number) << 24;
    k = Math.imul(k, M);
    k ^= k >>> 24;
    k = Math.imul(k, M);
    h = Math.imul(h, M) ^ k;
  }
  const tail = length & 3; // the last bytes, mixed in as Java's switch falls through
  if (tail === 3) h ^= (data[whole + 2] as number) << 16;
  if (tail >= 2) h ^= (data[whole + 1] as number) << 8;
  if (tail >= 1) h = Math.imul(h ^ (data[whole] as number), M);
  h ^= h >>> 13;
  h = Math.imul(h, M);
  h ^= h >>> 15;
  return h | 0;
}

/** The partition of a keyed record among `partitions`, as the Java client's default partitioner. */
export const partitionOfKey = (key: string | Uint8Array, partitions: number): number =>
  (murmur2(key) & 0x7fffffff) % partitions;
