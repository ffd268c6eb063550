import type pg from 'pg';
import { copyField, copyLines } from '../db/copy.js';
import type { Headers } from '../kafka/broker.js';
import { type PartitionKey, physicalTopic } from '../kafka/topics.js';
import { canonicalJson } from './canonical-json.js';
import { EVENT_TYPES, type EventEnvelope, type EventType, validateEvent } from './envelope.js';
import { markOutboxWritten } from './outbox-signal.js';
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
export const OUTBOX_CHANNEL = 'onto_outbox';

/** The same event id was enqueued before with a different body. */
export class OutboxConflictError extends Error {
  override readonly name = 'OutboxConflictError';
  constructor(readonly eventId: string) {
    super(`event ${eventId} is already in the outbox with a different body`);
  }
}

export type EnqueueResult = { status: 'enqueued'; id: number } | { status: 'duplicate'; id: number };

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

/** An outbox row as enqueue writes it: checked, on its physical topic, in its lane. */
export interface OutboxRow {
  eventId: string;
  topic: string;
  key: string;
  lane: number;
  body: string;
  headers: string;
}

/** Checks messages (envelope, key) and makes the rows `enqueue` inserts. */
export function outboxRows(messages: OutboxMessage | OutboxMessage[], topicPrefix = ''): OutboxRow[] {
  const list = Array.isArray(messages) ? messages : [messages];
  return list.map((m) => {
    const event = validateEvent(m.event);
    checkKey(event, m.key);
    return {
      eventId: event.event_id,
      topic: physicalTopic(topicPrefix, EVENT_TYPES[event.type]),
      key: m.key,
      lane: laneOf(m.key),
      body: canonicalJson(event),
      headers: JSON.stringify(m.headers ?? {}),
    };
  });
}

/**
 * The statement that inserts the rows into outbox and outbox_pending and answers the ids of the
 * new ones (an event id already there is skipped): what enqueue runs, and what a writer that
 * sends its last statements with COMMIT (queryTogether) puts among them.
 */
export function outboxInsert(rows: OutboxRow[]): { text: string; values: unknown[] } {
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

/**
 * An event bound for a bundle: its body is the bundle's template filled with `values`,
 * `parts[0] values[0] parts[1] … values[n-1] parts[n]`. Its producer checked it (as outboxRows
 * checks) and spelled every value as JSON text, which holds no tab and no newline.
 */
export interface BundledEvent {
  eventId: string;
  key: string;
  lane: number;
  values: string[];
}

/** A bundle's events, fields escaped for COPY, joined by an escaped tab (a literal one in the row). */
const TAB = '\\t';
const NEWLINE = '\\n';

/**
 * Adds events of one topic that share a body template to the outbox as bundles (migrations/008),
 * in the caller's transaction: grouped by lane, at most BUNDLE_MAX to a row, in the order given
 * within a lane, with the same headers. A bundle's body is the template's parts as a JSON array on
 * its first line, then a line per event: event id, key and values, tab-separated; the relay fills
 * the template. A write of many events then costs a row per bundle rather than two per event,
 * and the template's bytes once per bundle. The rows go in by COPY and are queued; every bundle
 * gets its own event id. With `escaped`, the values are already escaped by copyField (a producer
 * that copies the same text into its own tables escapes it once). Answers how many bundles.
 */
export async function enqueueBundles(
  tx: pg.ClientBase,
  bundle: { topic: string; headers: string; parts: string[]; escaped?: boolean },
  events: Iterable<BundledEvent>,
): Promise<number> {
  const fields = bundle.parts.length - 1;
  // Per lane, its bundles of events, in the order given.
  const lanes = new Map<number, BundledEvent[][]>();
  for (const e of events) {
    if (/[\t\n]/.test(e.key)) throw new TypeError(`a bundled key holds a tab or newline: ${JSON.stringify(e.key)}`);
    if (e.values.length !== fields)
      throw new TypeError(`event ${e.eventId} has ${e.values.length} values, not ${fields}`);
    let bundles = lanes.get(e.lane);
    if (!bundles) {
      bundles = [];
      lanes.set(e.lane, bundles);
    }
    let last = bundles[bundles.length - 1];
    if (!last || last.length === BUNDLE_MAX) {
      last = [];
      bundles.push(last);
    }
    last.push(e);
  }
  const ids: string[] = [];
  const parts = copyField(JSON.stringify(bundle.parts));
  const head = `\t${copyField(bundle.topic)}\t`;
  const tail = `\t${copyField(bundle.headers)}\t`;
  const field = bundle.escaped
    ? (values: string[]) => values.join(TAB)
    : (values: string[]) => values.map(copyField).join(TAB);
  // A row per bundle: its columns, the parts, then a line per event (separators escaped, since
  // they are inside the body's field), then the rest of its columns.
  await copyLines(
    tx,
    'outbox (event_id, topic, partition_key, lane, body, headers, bundle)',
    (function* () {
      for (const [lane, bundles] of lanes) {
        for (const b of bundles) {
          const id = uuidv7();
          ids.push(id);
          yield `${id}${head}${copyField((b[0] as BundledEvent).key)}\t${lane}\t${parts}`;
          for (const e of b) yield `${NEWLINE}${e.eventId}${TAB}${copyField(e.key)}${TAB}${field(e.values)}`;
          yield `${tail}${b.length}\n`;
        }
      }
    })(),
  );
  if (ids.length === 0) return 0;
  await tx.query(
    'INSERT INTO outbox_pending (lane, id) SELECT lane, id FROM outbox WHERE event_id = ANY($1::uuid[]) ORDER BY id',
    [ids],
  );
  markOutboxWritten(tx);
  return ids.length;
}

/**
 * Adds events to the outbox inside the caller's transaction, so they exist if and only if the
 * state change commits. Enqueuing an event id again with the same body is a no-op reported as
 * `duplicate`; with another body it throws OutboxConflictError.
 */
export async function enqueue(
  tx: Queryable,
  messages: OutboxMessage | OutboxMessage[],
  topicPrefix = '',
): Promise<EnqueueResult[]> {
  const rows = outboxRows(messages, topicPrefix);
  if (rows.length === 0) return [];
  const ids = rows.map((r) => r.eventId);
  const bodies = rows.map((r) => r.body);
  const statement = outboxInsert(rows);
  const inserted = await tx.query<{ id: number; event_id: string }>(statement.text, statement.values);
  const byId = new Map(inserted.rows.map((r) => [r.event_id, r.id]));
  const results: EnqueueResult[] = [];
  const missing = ids.filter((id) => !byId.has(id));
  const existing = new Map<string, { id: number; body: string }>();
  if (missing.length > 0) {
    const found = await tx.query<{ id: number; event_id: string; body: string }>(
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
  // No NOTIFY here: it would serialise commits. inTransaction wakes the relays after COMMIT.
  if (byId.size > 0) markOutboxWritten(tx);
  return results;
}
