import type pg from 'pg';
import { copyField, copyLines } from '../db/copy.js';
import type { Statement } from '../db/pipeline.js';
import type { Headers } from '../kafka/broker.js';
import { type PartitionKey, physicalTopic } from '../kafka/topics.js';
import { traceparentFor } from '../tracing/context.js';
import { canonicalJson } from './canonical-json.js';
import { EVENT_TYPES, type EventEnvelope, type EventType, validateEvent } from './envelope.js';
import { wakeRelaysAfterCommit } from './outbox-signal.js';
import { checkEventBytes, recordLimits } from './record-limits.js';
import { uuidv7 } from './uuidv7.js';

/** Anything that runs a parameterised query: a pool, a client, a transaction's client. */
export interface Queryable {
  query<R extends Record<string, unknown> = Record<string, unknown>>(
    text: string,
    values?: unknown[],
  ): Promise<{ rows: R[]; rowCount: number | null }>;
}

/** Lanes partition the outbox by key; see migrations/002 and the relay. */
export const OUTBOX_LANES = 64;

/** The same event id was enqueued before with a different body. */
export class OutboxConflictError extends Error {
  override readonly name = 'OutboxConflictError';
  constructor(readonly eventId: string) {
    super(`event ${eventId} is already in the outbox with a different body`);
  }
}

/** What `Outbox.add` did with an event: added, or found there already with the same body. */
export type OutboxAddResult = { status: 'enqueued'; id: number } | { status: 'duplicate'; id: number };

export interface OutboxMessage<T extends EventType = EventType> {
  event: EventEnvelope & { type: T };
  /** Built by the topic catalog for the event's topic: `TOPICS[topic].key(…)`. */
  key: PartitionKey<(typeof EVENT_TYPES)[T]>;
  headers?: Headers;
}

/** Which lane a key belongs to: FNV-1a, stable across processes and languages. */
export function laneOf(key: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) {
    hash ^= key.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash % OUTBOX_LANES;
}

function checkKey(event: EventEnvelope, key: string) {
  // Every key of a world-scoped topic starts with the world id; a key from another world or
  // built by hand for another topic is refused here rather than misrouted.
  const topic = EVENT_TYPES[event.type];
  if (topic === 'onto.identity') return;
  const world = key.split('/')[0];
  if (world !== encodeURIComponent(event.world_id)) {
    throw new TypeError(`partition key ${JSON.stringify(key)} does not belong to world ${event.world_id} on ${topic}`);
  }
}

/** An outbox row as the Outbox writes it: checked, on its physical topic, in its lane. */
interface OutboxRow {
  eventId: string;
  topic: string;
  key: string;
  lane: number;
  body: string;
  headers: string;
}

/** Rows of messages checked ahead of their write (checkOutboxMessage), so that they are made once. */
const checkedRows = new WeakMap<OutboxMessage, { topicPrefix: string; row: OutboxRow }>();

/** Checks a message (envelope, key, size against its topic's limit) and makes its outbox row. */
function outboxRow(m: OutboxMessage, topicPrefix: string): OutboxRow {
  const checked = checkedRows.get(m);
  if (checked?.topicPrefix === topicPrefix) return checked.row;
  const event = validateEvent(m.event);
  checkKey(event, m.key);
  // The trace the event continues (docs/adr/0055): the message's own, else that of its cause or
  // of the active span; none when tracing is off.
  const traceparent = m.headers?.traceparent === undefined ? traceparentFor(event.caused_by) : undefined;
  const row = {
    eventId: event.event_id,
    topic: physicalTopic(topicPrefix, EVENT_TYPES[event.type]),
    key: m.key,
    lane: laneOf(m.key),
    body: canonicalJson(event),
    headers: JSON.stringify(traceparent ? { ...m.headers, traceparent } : (m.headers ?? {})),
  };
  const bytes = Buffer.byteLength(row.body) + Buffer.byteLength(row.key) + Buffer.byteLength(row.headers);
  checkEventBytes(row.eventId, row.topic, bytes);
  return row;
}

/** Checks messages (envelope, key, size) and makes their outbox rows. */
function outboxRows(messages: OutboxMessage | OutboxMessage[], topicPrefix = ''): OutboxRow[] {
  const list = Array.isArray(messages) ? messages : [messages];
  return list.map((m) => outboxRow(m, topicPrefix));
}

/**
 * Checks a message as the Outbox will when it is added (envelope, partition key, size: an event
 * larger than its topic accepts throws EventTooLargeError, a 413), for a writer that must refuse
 * one write of a group before the group's transaction; adding it later does not check it again.
 */
export function checkOutboxMessage(message: OutboxMessage, topicPrefix = ''): void {
  checkedRows.set(message, { topicPrefix, row: outboxRow(message, topicPrefix) });
}

/**
 * The statement that inserts the rows into outbox and outbox_pending and answers the ids of the
 * new ones (an event id already there is skipped).
 */
function outboxInsert(rows: OutboxRow[]): { text: string; values: unknown[] } {
  return {
    text: `WITH added AS (
       INSERT INTO outbox (event_id, topic, partition_key, lane, body, headers)
       SELECT e, t, k, l, b, h
         FROM unnest($1::uuid[], $2::text[], $3::text[], $4::smallint[], $5::text[], $6::jsonb[])
              WITH ORDINALITY AS u(e, t, k, l, b, h, n)
        ORDER BY n
       ON CONFLICT (event_id) DO NOTHING
       RETURNING id, event_id, lane
     ), queued AS (
       INSERT INTO outbox_pending (lane, id) SELECT lane, id FROM added
     )
     SELECT id, event_id::text FROM added`,
    values: [
      rows.map((r) => r.eventId),
      rows.map((r) => r.topic),
      rows.map((r) => r.key),
      rows.map((r) => r.lane),
      rows.map((r) => r.body),
      rows.map((r) => r.headers),
    ],
  };
}

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
 * The one way events are written: into the outbox, in the transaction of `db`, so that they exist
 * if and only if the state change commits, and the relays are woken once it has committed (see
 * outbox-signal.ts; no caller wakes them). Every message is checked (envelope, partition key of
 * its world and topic) and goes to its topic under `topicPrefix`.
 *
 * - `add`: events written now, answered one by one (one round trip; one more for duplicates);
 * - `addStatement`: the same insert as a statement the caller sends among its own, e.g. with
 *   COMMIT (TransactionOutcome.last): no round trip of its own;
 * - `bundles`: many events of one template, as bundle rows (migrations/008).
 */
export class Outbox<Db extends Queryable = Queryable> {
  constructor(
    private readonly db: Db,
    private readonly topicPrefix = '',
  ) {}

  /**
   * Adds the events now. An event id added before with the same body is a no-op reported as
   * `duplicate`; with another body it throws OutboxConflictError.
   */
  async add(messages: OutboxMessage | OutboxMessage[]): Promise<OutboxAddResult[]> {
    const rows = outboxRows(messages, this.topicPrefix);
    if (rows.length === 0) return [];
    const ids = rows.map((r) => r.eventId);
    const bodies = rows.map((r) => r.body);
    const statement = outboxInsert(rows);
    const inserted = await this.db.query<{ id: number; event_id: string }>(statement.text, statement.values);
    const byId = new Map(inserted.rows.map((r) => [r.event_id, r.id]));
    const results: OutboxAddResult[] = [];
    const missing = ids.filter((id) => !byId.has(id));
    const existing = new Map<string, { id: number; body: string }>();
    if (missing.length > 0) {
      const found = await this.db.query<{ id: number; event_id: string; body: string }>(
        'SELECT id, event_id::text, body FROM outbox WHERE event_id = ANY($1::uuid[])',
        [missing],
      );
      for (const r of found.rows) existing.set(r.event_id, { id: r.id, body: r.body });
    }
    for (const [i, id] of ids.entries()) {
      const fresh = byId.get(id);
      if (fresh !== undefined) {
        results.push({ status: 'enqueued', id: fresh });
        continue;
      }
      const prior = existing.get(id);
      if (!prior || prior.body !== bodies[i]) throw new OutboxConflictError(id);
      results.push({ status: 'duplicate', id: prior.id });
    }
    if (byId.size > 0) wakeRelaysAfterCommit(this.db);
    return results;
  }

  /**
   * The statement that adds the events, for the caller to send among its own statements in this
   * transaction (queryTogether, TransactionOutcome.last): a writer that sends its last writes with
   * COMMIT saves `add`'s round trip (docs/adr/0013). Nobody reads its answer: an event id already
   * in the outbox is skipped unchecked.
   */
  addStatement(messages: OutboxMessage | OutboxMessage[]): Statement {
    const statement = outboxInsert(outboxRows(messages, this.topicPrefix));
    wakeRelaysAfterCommit(this.db);
    return statement;
  }

  /**
   * Bundles for many events of one template, filled event by event and written by their `write`
   * (see OutboxBundles). `sample`, an event of the template, is checked as `add` checks it and
   * gives the bundles' topic and headers.
   */
  bundles(
    this: Outbox<Db & pg.ClientBase>,
    template: { sample: OutboxMessage; parts: string[]; escaped?: boolean },
  ): OutboxBundles {
    const [row] = outboxRows(template.sample, this.topicPrefix);
    if (!row) throw new Error('no outbox row for the sample');
    return new OutboxBundles(this.db, {
      topic: row.topic,
      headers: row.headers,
      parts: template.parts,
      escaped: template.escaped ?? false,
    });
  }
}
