/**
 * patches/kafkajs@2.2.4.patch replaces kafkajs's record encoder and decoder on the relay's and
 * the consumers' hot paths (ADR 5). The broker-facing tests prove that what it writes is accepted
 * and read back; these pin the bytes: the patched encoder writes exactly what kafkajs's own
 * encoder (kept in the patch as `encodeRecord`) writes, and the patched decoder reads offsets and
 * timestamps exactly, beyond 2^53 too.
 */
import { createRequire } from 'node:module';
import * as net from 'node:net';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { createKafkaBroker } from '../src/kafka/kafkajs-broker.js';

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
        // 2^40 and -2^35 take the decoder's Long path, the others its Number path (at most 28 bits).
        timestampDelta: [0, 1, -1, 64, -65, 123_456_789, 2 ** 40, -(2 ** 35)][i % 8],
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

  it.each([
    ['9007199254740993', '1767225600000'], // offsets past 2^53 + 1: not a double
    ['123456789', '1767225600000'], // both exact as Numbers
    ['42', '9007199254740993'], // a timestamp past 2^53
  ])(
    'decodes what it encodes, offsets and timestamps exact (first offset %s, first timestamp %s)',
    (firstOffset, firstTimestamp) => {
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
          Object.entries(record.headers ?? {}).map(([k, v]) => [
            k,
            Array.isArray(v) ? v.map((x) => bytes(x)) : bytes(v),
          ]),
        );
        expect(decoded.headers).toEqual(headers);
      }
    },
  );
});

describe('the patched Encoder (a rope: large pieces kept by reference)', () => {
  type Enc = {
    writeInt32(n: number): Enc;
    writeInt8(n: number): Enc;
    writeString(s: string): Enc;
    writeBytes(b: Buffer | string | null): Enc;
    writeBuffer(b: Buffer): Enc;
    writeEncoder(e: Enc): Enc;
    writeArray(a: unknown[], type?: string): Enc;
    writeVarIntArray(a: unknown[], type?: string): Enc;
    size(): number;
    buffer: Buffer;
  };
  const Encoder = require('kafkajs/src/protocol/encoder') as new (size?: number) => Enc;
  const bytes = (n: number, fill: number) => Buffer.alloc(n, fill);

  it('writes the same bytes as a flat buffer would, whatever mix of small and large pieces', () => {
    const expected: Buffer[] = [];
    const int32 = (n: number) => {
      const b = Buffer.alloc(4);
      b.writeInt32BE(n);
      return b;
    };
    const inner = new Encoder().writeInt8(7).writeBuffer(bytes(20_000, 1)).writeString('tail');
    const innerBytes = Buffer.concat([Buffer.from([7]), bytes(20_000, 1), Buffer.from([0, 4]), Buffer.from('tail')]);
    const small = new Encoder().writeInt32(42);
    const outer = new Encoder(4)
      .writeInt32(1)
      .writeBytes(bytes(9000, 2))
      .writeEncoder(inner)
      .writeBytes(bytes(10, 3))
      .writeArray([small, inner], 'object')
      .writeBytes('text')
      .writeBuffer(bytes(70_000, 4));
    expected.push(int32(1), int32(9000), bytes(9000, 2), innerBytes, int32(10), bytes(10, 3));
    expected.push(int32(2), int32(42), innerBytes, int32(4), Buffer.from('text'), bytes(70_000, 4));
    const flat = Buffer.concat(expected);
    expect(outer.size()).toBe(flat.length);
    expect(outer.buffer.equals(flat)).toBe(true);
    // Asking again gives the same bytes, and writing on after a join keeps them.
    expect(outer.buffer.equals(flat)).toBe(true);
    outer.writeInt8(9).writeBuffer(bytes(8192, 5));
    expect(outer.buffer.equals(Buffer.concat([flat, Buffer.from([9]), bytes(8192, 5)]))).toBe(true);
    // The inner encoder, taken by reference, is unchanged by what its holder wrote.
    expect(inner.buffer.equals(innerBytes)).toBe(true);
  });

  it('writes a produce request for large and small batches that decodes back to its records', async () => {
    const request = require('kafkajs/src/protocol/requests/produce/v3/request') as (args: unknown) => {
      encode(): Promise<Enc>;
    };
    const Decoder = require('kafkajs/src/protocol/decoder') as new (
      b: Buffer,
    ) => {
      buffer: Buffer;
      offset: number;
      readString(): string | null;
      readInt16(): number;
      readInt32(): number;
    };
    const RecordBatchDecoder = require('kafkajs/src/protocol/recordBatch/v0/decoder') as (
      d: unknown,
    ) => Promise<{ records: { key: Buffer; value: Buffer }[] }>;
    const crc32C = require('kafkajs/src/protocol/recordBatch/crc32C') as (b: Buffer) => number;
    const messages = (n: number, size: number) =>
      Array.from({ length: n }, (_, i) => ({ key: `k${i}`, value: `${i}:`.padEnd(size, 'v') }));
    const topicData = [
      {
        topic: 't1',
        partitions: [
          { partition: 0, firstSequence: 0, messages: messages(300, 400) },
          { partition: 1, firstSequence: 0, messages: messages(2, 10) },
        ],
      },
      { topic: 't2', partitions: [{ partition: 5, firstSequence: 0, messages: messages(1, 30_000) }] },
    ];
    const encoded = await request({ acks: -1, timeout: 1000, topicData }).encode();
    const d = new Decoder(encoded.buffer);
    expect(d.readString()).toBeNull(); // transactional id
    expect(d.readInt16()).toBe(-1); // acks
    expect(d.readInt32()).toBe(1000); // timeout
    const decodedTopics = [];
    for (let t = d.readInt32(); t > 0; t--) {
      const topic = d.readString();
      const partitions = [];
      for (let p = d.readInt32(); p > 0; p--) {
        const partition = d.readInt32();
        const size = d.readInt32();
        const batchBytes = d.buffer.subarray(d.offset, d.offset + size);
        d.offset += size;
        // The CRC-32C covers the batch from its attributes (byte 21) to its end.
        expect(crc32C(batchBytes.subarray(21))).toBe(batchBytes.readUInt32BE(17));
        const batch = await RecordBatchDecoder(new Decoder(batchBytes));
        partitions.push({ partition, values: batch.records.map((r) => [String(r.key), String(r.value)]) });
      }
      decodedTopics.push({ topic, partitions });
    }
    expect(d.offset).toBe(encoded.buffer.length);
    expect(decodedTopics).toEqual(
      topicData.map((t) => ({
        topic: t.topic,
        partitions: t.partitions.map((p) => ({
          partition: p.partition,
          values: p.messages.map((m) => [m.key, m.value]),
        })),
      })),
    );
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

describe('the patched request timeout check (a timer while requests are in flight, no interval)', () => {
  type Entry = { correlationId: number; apiName: string; apiKey: number; apiVersion: number };
  type Queue = {
    push(request: {
      entry: Entry & { resolve(v: unknown): void; reject(e: Error): void };
      expectResponse: boolean;
      requestTimeout?: number;
      sendRequest(): void;
    }): void;
    fulfillRequest(response: { correlationId: number; payload: null; size: number }): void;
    scheduleRequestTimeoutCheck(): void;
    destroy(): void;
    requestTimeoutTimerId: unknown;
    inflight: Map<number, unknown>;
  };
  const RequestQueue = require('kafkajs/src/network/requestQueue') as new (options: Record<string, unknown>) => Queue;
  const quiet = { debug() {}, info() {}, warn() {}, error() {} };
  const queue = () =>
    new RequestQueue({
      maxInFlightRequests: 5,
      requestTimeout: 200,
      enforceRequestTimeout: true,
      clientId: 'test',
      broker: 'nowhere:0',
      logger: quiet,
      isConnected: () => true,
    });
  let started = 0;
  const send = (q: Queue, correlationId: number, requestTimeout?: number) =>
    new Promise<{ outcome: string; at: number }>((resolve) => {
      q.push({
        entry: {
          correlationId,
          apiName: 'Fetch',
          apiKey: 1,
          apiVersion: 11,
          resolve: () => resolve({ outcome: 'answered', at: performance.now() - started }),
          reject: (e) => resolve({ outcome: e.name, at: performance.now() - started }),
        },
        expectResponse: true,
        ...(requestTimeout ? { requestTimeout } : {}),
        sendRequest: () => {},
      });
    });

  it('arms nothing on a connection with nothing in flight', () => {
    const q = queue();
    q.scheduleRequestTimeoutCheck();
    expect(q.requestTimeoutTimerId).toBeNull();
    q.destroy();
  });

  it('times out each request once it has been in flight longer than its own timeout, and answers the others', async () => {
    const q = queue();
    q.scheduleRequestTimeoutCheck();
    started = performance.now();
    const answered = send(q, 3);
    const short = send(q, 1);
    const long = send(q, 2, 600);
    // The broker's answer to the first request, due before any timeout: part of the scenario, not a wait.
    setTimeout(() => q.fulfillRequest({ correlationId: 3, payload: null, size: 0 }), 50);
    const [a, s, l] = await Promise.all([answered, short, long]);
    expect(a.outcome).toBe('answered');
    expect(s.outcome).toBe('KafkaJSRequestTimeoutError');
    expect(s.at).toBeGreaterThanOrEqual(195);
    expect(s.at).toBeLessThan(450);
    expect(l.outcome).toBe('KafkaJSRequestTimeoutError');
    expect(l.at).toBeGreaterThanOrEqual(595);
    expect(l.at).toBeLessThan(900);
    expect(q.inflight.size).toBe(0);
    expect(q.requestTimeoutTimerId, 'no timer once nothing is in flight').toBeNull();
    q.destroy();
  });

  it('gives up on a broker that accepts the connection and never answers', async () => {
    const sockets = new Set<net.Socket>();
    const silent = net.createServer((socket) => {
      sockets.add(socket);
      socket.on('data', () => {}); // read and never answer
    });
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const { port } = silent.address() as net.AddressInfo;
    try {
      const broker = createKafkaBroker({
        brokers: [`127.0.0.1:${port}`],
        clientId: 'silent-test',
        logger: pino({ level: 'silent' }),
        requestTimeoutMs: 300,
        connectionTimeoutMs: 1000,
        retries: 0,
      });
      const began = performance.now();
      await expect(broker.admin()).rejects.toThrow(/timed out/i);
      expect(sockets.size, 'the connection was made; its first request went unanswered').toBeGreaterThan(0);
      expect(performance.now() - began).toBeLessThan(5000);
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
  });
});

/** The record without its length prefix, as the batch decoder hands it to the record decoder. */
function recordBody(encoded: Buffer): Buffer {
  return new Decoder(encoded).readVarIntBytes();
}
