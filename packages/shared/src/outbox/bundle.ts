import type pg from 'pg';
import { copyField, copyLines } from '../db/copy.js';
import { uuidv7 } from '../ids/uuidv7.js';
import { checkEventBytes, recordLimits } from './record-limits.js';
import { wakeRelaysAfterCommit } from './signal.js';

/*
 * The bundle format (kernel migrations/008), both ways: OutboxBundles writes many events of one
 * template as bundle rows, decodeBundle gives the relay their events back, and positions.ts reads
 * a world's newest seq out of them in SQL. The format is the kernel's own: no service reads it.
 */

/** Most events in one bundle row (migrations/008): the relay publishes a bundle in one send. */
export const BUNDLE_MAX = 256;

/** A bundle's events, fields escaped for COPY, joined by an escaped tab (a literal one in the row). */
const TAB = '\\t';
const NEWLINE = '\\n';

/** A bundle being filled: its events' lines, UTF-8 encoded as they come, off the JS heap. */
interface OpenBundle {
  firstKey: string;
  count: number;
  bytes: Buffer;
  used: number;
}

/** Bytes a bundle's buffer starts with; it doubles when full. */
const BUNDLE_START_BYTES = 16 * 1024;

/**
 * Events of one topic that share a body template, on their way into the outbox as bundles
 * (migrations/008): grouped by lane, at most BUNDLE_MAX to a row, in the order added within a
 * lane, with the same headers. A bundle's body is the template's parts as a JSON array on its
 * first line, then a line per event: event id, key and values, tab-separated; the relay fills the
 * template. A write of many events then costs a row per bundle rather than two per event, and the
 * template's bytes once per bundle.
 *
 * An event is added as it is made, `event(id, key, lane)` then one `value(…)` per field of the
 * template, and is encoded at once into its bundle's buffer: a bulk write of 100,000 objects kept
 * 100,000 event objects and 800,000 strings alive until its end, and the garbage collector copied
 * them about (docs/adr/0016). Each value is JSON text (no tab, no newline) the producer checked as
 * the Outbox checks a message; with `escaped`, it is already escaped for COPY by copyField (a producer that
 * copies the same text into its own tables escapes it once).
 */
export class OutboxBundles {
  private readonly lanes = new Map<number, OpenBundle[]>();
  private readonly fields: number;
  private open: OpenBundle | undefined;
  private openId = '';
  private values = 0;
  private added = 0;
  /** Bytes of the template's parts, which every event of the bundles holds. */
  private readonly partsBytes: number;
  /** The line of the event begun last, encoded when it ends. */
  private line = '';

  /** Made by Outbox.bundles. */
  constructor(
    private readonly tx: pg.ClientBase,
    private readonly bundle: { topic: string; headers: string; parts: string[]; escaped: boolean },
  ) {
    this.fields = bundle.parts.length - 1;
    this.partsBytes = bundle.parts.reduce((n, part) => n + Buffer.byteLength(part), 0);
  }

  /** Events added so far. */
  get size(): number {
    return this.added;
  }

  /** Starts an event; its values follow, one `value` call each. */
  event(eventId: string, key: string, lane: number): void {
    this.endEvent();
    if (/[\t\n]/.test(key)) throw new TypeError(`a bundled key holds a tab or newline: ${JSON.stringify(key)}`);
    let bundles = this.lanes.get(lane);
    if (!bundles) {
      bundles = [];
      this.lanes.set(lane, bundles);
    }
    let last = bundles[bundles.length - 1];
    if (!last || last.count === BUNDLE_MAX) {
      last = { firstKey: key, count: 0, bytes: Buffer.allocUnsafe(BUNDLE_START_BYTES), used: 0 };
      bundles.push(last);
    }
    last.count++;
    this.added++;
    this.open = last;
    this.openId = eventId;
    this.values = 0;
    this.line = `${NEWLINE}${eventId}${TAB}${copyField(key)}`;
  }

  /** The next value of the event begun last. */
  value(text: string): void {
    if (!this.open) throw new TypeError('a value before any event');
    this.line += TAB + (this.bundle.escaped ? text : copyField(text));
    this.values++;
  }

  /** Writes the bundles by COPY in the outbox's transaction and queues them; answers how many. */
  async write(): Promise<number> {
    const tx = this.tx;
    this.endEvent();
    const ids: string[] = [];
    const parts = copyField(JSON.stringify(this.bundle.parts));
    const head = `\t${copyField(this.bundle.topic)}\t`;
    const tail = `\t${copyField(this.bundle.headers)}\t`;
    const lanes = this.lanes;
    // A row per bundle: its columns, the parts, its events' lines (separators escaped, since
    // they are inside the body's field), then the rest of its columns.
    await copyLines(
      tx,
      'outbox (event_id, topic, partition_key, lane, body, headers, bundle)',
      (function* () {
        for (const [lane, bundles] of lanes) {
          for (const b of bundles) {
            const id = uuidv7();
            ids.push(id);
            yield `${id}${head}${copyField(b.firstKey)}\t${lane}\t${parts}`;
            yield b.bytes.subarray(0, b.used);
            yield `${tail}${b.count}\n`;
          }
        }
      })(),
    );
    this.lanes.clear();
    if (ids.length === 0) return 0;
    await tx.query(
      'INSERT INTO outbox_pending (lane, id) SELECT lane, id FROM outbox WHERE event_id = ANY($1::uuid[]) ORDER BY id',
      [ids],
    );
    wakeRelaysAfterCommit(tx);
    return ids.length;
  }

  /** Encodes the event begun last into its bundle: one write of its whole line. */
  private endEvent(): void {
    const b = this.open;
    if (!b) return;
    this.open = undefined;
    if (this.values !== this.fields) {
      throw new TypeError(`event ${this.openId} has ${this.values} values, not ${this.fields}`);
    }
    const text = this.line;
    this.line = '';
    // At most 3 bytes of UTF-8 per UTF-16 unit: measured only when that bound is over the limit.
    const limit = recordLimits.eventBytes(this.bundle.topic);
    const headersBytes = this.bundle.headers.length * 3;
    if (this.partsBytes + text.length * 3 + headersBytes > limit) {
      checkEventBytes(this.openId, this.bundle.topic, this.partsBytes + Buffer.byteLength(text) + headersBytes);
    }
    // At most 3 bytes of UTF-8 per UTF-16 unit.
    if (b.used + text.length * 3 > b.bytes.length) {
      const grown = Buffer.allocUnsafe(Math.max(b.bytes.length * 2, b.used + text.length * 3));
      b.bytes.copy(grown, 0, 0, b.used);
      b.bytes = grown;
    }
    b.used += b.bytes.write(text, b.used);
  }
}

/**
 * A bundle row's events, as the relay publishes them: the template's parts on the first line of
 * its body, then an event per line (id, key, values). Throws on a body that is not that format
 * (a bug, or a row written by hand) or that holds another number of events than its row says.
 */
export function decodeBundle(
  rowId: number | string,
  body: string,
  count: number,
): { eventId: string; key: string; value: string }[] {
  const events: { eventId: string; key: string; value: string }[] = [];
  const lines = body.split('\n');
  const parts: unknown = JSON.parse(lines[0] as string);
  if (!Array.isArray(parts) || parts.length === 0 || !parts.every((p) => typeof p === 'string')) {
    throw new Error(`outbox bundle ${rowId} has no template on its first line`);
  }
  for (let l = 1; l < lines.length; l++) {
    const fields = (lines[l] as string).split('\t');
    if (fields.length !== parts.length + 1) throw new Error(`outbox bundle ${rowId} is malformed at line ${l + 1}`);
    let value = parts[0] as string;
    for (let i = 1; i < parts.length; i++) value += (fields[i + 1] as string) + parts[i];
    events.push({ eventId: fields[0] as string, key: fields[1] as string, value });
  }
  if (events.length !== count) {
    throw new Error(`outbox bundle ${rowId} holds ${events.length} events, not ${count}`);
  }
  return events;
}
