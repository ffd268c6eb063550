/**
 * patches/kafkajs@2.2.4.patch replaces kafkajs's record encoder and decoder on the relay's and
 * the consumers' hot paths (ADR 5). The broker-facing tests prove that what it writes is accepted
 * and read back; these pin the bytes: the patched encoder writes exactly what kafkajs's own
 * encoder (kept in the patch as `encodeRecord`) writes, and the patched decoder reads offsets and
 * timestamps exactly, beyond 2^53 too.
 */
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';

const require = createRequire(import.meta.url);
type Encoded = { buffer: Buffer };
type RecordInput = {
  offsetDelta?: number;
  timestampDelta?: number;
  key?: unknown;
  value?: unknown;
  headers?: Record<string, unknown>;
};
const encode = require('kafkajs/src/protocol/recordBatch/record/v0') as ((r: RecordInput) => Encoded) & {
  encodeRecord?: (r: RecordInput) => Encoded;
};
const decodeRecord = require('kafkajs/src/protocol/recordBatch/record/v0/decoder') as (
  decoder: unknown,
  context: Record<string, unknown>,
) => { offset: string; timestamp: string; key: Buffer | null; value: Buffer | null; headers: Record<string, unknown> };
const Decoder = require('kafkajs/src/protocol/decoder') as new (
  buffer: Buffer,
) => {
  readVarIntBytes(): Buffer;
};

/** A deterministic spread of records: empty and null fields, multi-byte varints, unicode, repeated headers. */
function* records(): Generator<RecordInput> {
  const texts = ['', 'a', 'ünïcødé ✓ 漢字', 'x'.repeat(127), 'y'.repeat(128), 'z'.repeat(20_000)];
  let i = 0;
  for (const key of [null, undefined, 'world/Order/o-1', Buffer.from([0, 255, 1])]) {
    for (const value of [null, ...texts, Buffer.alloc(300, 7)]) {
      i++;
      yield {
        offsetDelta: [0, 1, 63, 64, 127, 128, 8191, 8192, 1_000_000][i % 9],
        timestampDelta: [0, 1, -1, 64, -65, 123_456_789][i % 6],
        key,
        value,
        headers:
          i % 3 === 0
            ? {}
            : { 'x-request-id': `req-${i}`, 'x-trace': ['a', 'b', Buffer.from('c')], ünï: texts[i % texts.length] },
      };
    }
  }
}

describe('the kafkajs patch', () => {
  it('encodes every record to the same bytes as kafkajs own encoder', () => {
    const original = encode.encodeRecord;
    expect(original, 'the patch keeps kafkajs own encoder as encodeRecord').toBeTypeOf('function');
    let n = 0;
    for (const record of records()) {
      expect(
        encode(record).buffer.equals(original?.(record).buffer as Buffer),
        JSON.stringify(record).slice(0, 200),
      ).toBe(true);
      n++;
    }
    expect(n).toBeGreaterThan(30);
  });

  it('decodes what it encodes, offsets and timestamps exact beyond 2^53', () => {
    const firstOffset = '9007199254740993'; // 2^53 + 1: not a double
    const firstTimestamp = '1767225600000';
    for (const record of records()) {
      const encoded = encode(record).buffer;
      const decoded = decodeRecord(new Decoder(recordBody(encoded)), {
        firstOffset,
        firstTimestamp,
        magicByte: 2,
      });
      expect(decoded.offset).toBe((BigInt(firstOffset) + BigInt(record.offsetDelta ?? 0)).toString());
      expect(decoded.timestamp).toBe((BigInt(firstTimestamp) + BigInt(record.timestampDelta ?? 0)).toString());
      const bytes = (v: unknown) => (v == null ? null : Buffer.isBuffer(v) ? v : Buffer.from(String(v)));
      expect(decoded.key).toEqual(bytes(record.key));
      expect(decoded.value).toEqual(bytes(record.value));
      const headers = Object.fromEntries(
        Object.entries(record.headers ?? {}).map(([k, v]) => [k, Array.isArray(v) ? v.map((x) => bytes(x)) : bytes(v)]),
      );
      expect(decoded.headers).toEqual(headers);
    }
  });
});

describe('the patched CRC32-C', () => {
  const crc32C = require('kafkajs/src/protocol/recordBatch/crc32C') as (b: Buffer) => number;
  /** The textbook bytewise CRC32-C, the reference the patched slicing-by-8 must match. */
  const reference = (buffer: Buffer) => {
    let crc = -1;
    for (const byte of buffer) {
      crc ^= byte;
      for (let k = 0; k < 8; k++) crc = crc & 1 ? (crc >>> 1) ^ 0x82f63b78 : crc >>> 1;
    }
    return (crc ^ -1) >>> 0;
  };

  it('gives the standard check value', () => {
    expect(crc32C(Buffer.from('123456789'))).toBe(0xe3069283);
    expect(crc32C(Buffer.alloc(0))).toBe(0);
  });

  it('matches the bytewise reference on every length and alignment', () => {
    let seed = 42;
    const bytes = Buffer.alloc(5000);
    for (let i = 0; i < bytes.length; i++) {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      bytes[i] = seed >>> 16;
    }
    for (let start = 0; start < 8; start++) {
      for (let length = 0; length < 70; length++) {
        const slice = bytes.subarray(start, start + length);
        expect(crc32C(slice)).toBe(reference(slice));
      }
    }
    expect(crc32C(bytes)).toBe(reference(bytes));
  });
});

/** The record without its length prefix, as the batch decoder hands it to the record decoder. */
function recordBody(encoded: Buffer): Buffer {
  return new Decoder(encoded).readVarIntBytes();
}
