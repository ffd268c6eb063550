import type pg from 'pg';
import type { Statement } from '../db/pipeline.js';
import type { Queryable } from '../db/queryable.js';
import { EVENT_TYPES, type EventEnvelope, type EventType, validateEvent } from '../events/envelope.js';
import { canonicalJson } from '../json/canonical.js';
import type { Headers } from '../kafka/broker.js';
import { type PartitionKey, physicalTopic } from '../kafka/topics.js';
import { traceparentFor } from '../tracing/context.js';
import { OutboxBundles } from './bundle.js';
import { checkEventBytes } from './record-limits.js';

import { wakeRelaysAfterCommit } from './signal.js';

export type { Queryable };

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
