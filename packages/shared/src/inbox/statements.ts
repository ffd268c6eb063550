import type pg from 'pg';
import type { Statement } from '../db/pipeline.js';
import type { ReceivedEvent } from './options.js';

/** What the inbox statement answers (see recordStatement). */
export interface Recorded {
  seen: string[];
  parked: string[];
  known: string[];
  blocked: string[];
  /** The events of the batch with no inbox row inserted: usually none, so little to send and parse. */
  notInserted: string[];
  /** How many inbox rows the statement inserted. */
  inserted: number;
}

/** The key parking orders by: the record's key, else the event's. */
export function partitionKey(e: ReceivedEvent): string {
  return e.message.key ?? e.event.key;
}

/** A topic and partition key as one string, as the inbox statement answers blocked keys. */
export const keyOf = (r: { topic: string; partition_key: string }) => `${r.topic}\u001f${r.partition_key}`;

/** The smallest UUIDv7 of a millisecond: every id drawn at or after it sorts after it. */
export function uuidv7Floor(ms: number): string {
  const hex = Math.max(0, Math.floor(ms)).toString(16).padStart(12, '0');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-7000-8000-000000000000`;
}

/**
 * Deletes a consumer's inbox rows of events older than the retention, `chunk` rows per statement
 * until none is left; answers how many. Event ids are UUIDv7, so "older" is a range of the
 * primary key, read in its order; a row is only taken when it was also processed before the
 * retention, so an event from a producer whose clock ran behind is still kept its full window.
 */
export async function pruneInbox(pool: pg.Pool, consumer: string, retentionMs: number, chunk = 5000): Promise<number> {
  const floor = uuidv7Floor(Date.now() - retentionMs);
  let total = 0;
  for (;;) {
    const { rowCount } = await pool.query(
      `DELETE FROM inbox WHERE consumer = $1 AND event_id IN (
         SELECT event_id FROM inbox
          WHERE consumer = $1 AND event_id < $2::uuid
            AND processed_at < now() - make_interval(secs => $3::double precision / 1000)
          ORDER BY event_id LIMIT $4 FOR UPDATE SKIP LOCKED)`,
      [consumer, floor, retentionMs, chunk],
    );
    total += rowCount ?? 0;
    if ((rowCount ?? 0) < chunk) return total;
  }
}

/** The inbox's columns of the events, as arrays: event id, type, topic, partition, offset. */
const inboxColumns = (events: ReceivedEvent[]) => [
  events.map((e) => e.event.event_id),
  events.map((e) => e.event.type),
  events.map((e) => e.message.topic),
  events.map((e) => e.message.partition),
  events.map((e) => e.message.offset),
];

/** Inserts inbox rows; returns the ids that were not there yet. */
export async function recordEvents(
  tx: pg.ClientBase,
  consumer: string,
  events: ReceivedEvent[],
  outcome: 'applied' | 'dead_lettered',
): Promise<string[]> {
  if (events.length === 0) return [];
  const { rows } = await tx.query<{ event_id: string }>(
    `INSERT INTO inbox (consumer, event_id, event_type, topic, partition, "offset", outcome)
     SELECT $1, e, t, tp, p, o, $7 FROM unnest($2::uuid[], $3::text[], $4::text[], $5::int[], $6::bigint[])
       AS u(e, t, tp, p, o)
     ON CONFLICT (consumer, event_id) DO NOTHING
     RETURNING event_id::text`,
    [consumer, ...inboxColumns(events), outcome],
  );
  return rows.map((r) => r.event_id);
}

/** Takes back the inbox rows of events parked after all (see recordStatement). */
export function unrecordStatement(consumer: string, eventIds: string[]): Statement {
  return {
    text: 'DELETE FROM inbox WHERE consumer = $1 AND event_id = ANY($2::uuid[])',
    values: [consumer, eventIds],
  };
}

/**
 * What the inbox knows of the events, and inbox rows for those that may be applied, in one
 * statement. A row is inserted for every event that is not parked, whose key has nothing
 * parked and whose cause is handled or comes earlier in the batch; the consumer takes back
 * the few it then parks after all (their cause, or an event before them on their key, parked
 * in this batch). All parts read the statement's one snapshot: `seen` is what was there before.
 */
export function recordStatement(consumer: string, events: ReceivedEvent[]): Statement {
  return {
    text: `WITH batch AS (
       SELECT u.event_id, u.event_type, u.topic, u.part, u.off, u.partition_key, u.caused_by, u.n
         FROM unnest($2::uuid[], $3::text[], $4::text[], $5::int[], $6::bigint[], $7::text[], $8::uuid[])
         WITH ORDINALITY AS u(event_id, event_type, topic, part, off, partition_key, caused_by, n)
     ), known AS (
       -- One index probe per cause (LATERAL … LIMIT 1 cannot become a hashed subplan, which
       -- read the consumer's whole inbox once per batch: 0.5 s a batch at 200,000 rows).
       SELECT DISTINCT b.caused_by FROM batch b
        CROSS JOIN LATERAL (
          SELECT 1 FROM inbox i WHERE i.consumer = $1 AND i.event_id = b.caused_by
          UNION ALL
          SELECT 1 FROM outbox o WHERE o.event_id = b.caused_by
          LIMIT 1
        ) found
        WHERE b.caused_by IS NOT NULL
     ), inserted AS (
       INSERT INTO inbox (consumer, event_id, event_type, topic, partition, "offset", outcome)
       SELECT $1, b.event_id, b.event_type, b.topic, b.part, b.off, 'applied' FROM batch b
        WHERE NOT EXISTS (SELECT 1 FROM inbox_deferred d WHERE d.consumer = $1 AND d.event_id = b.event_id)
          AND NOT EXISTS (SELECT 1 FROM inbox_deferred d
                           WHERE d.consumer = $1 AND d.topic = b.topic AND d.partition_key = b.partition_key)
          AND (b.caused_by IS NULL
               OR b.caused_by IN (SELECT caused_by FROM known)
               OR EXISTS (SELECT 1 FROM batch c WHERE c.event_id = b.caused_by AND c.n < b.n))
        ORDER BY b.n
       ON CONFLICT (consumer, event_id) DO NOTHING
       RETURNING event_id
     ), skipped AS MATERIALIZED (
       -- Only an event that got no inbox row can have been seen or parked before: the inbox and
       -- inbox_deferred are probed for these, usually none, rather than for the whole batch.
       SELECT b.event_id FROM batch b WHERE NOT EXISTS (SELECT 1 FROM inserted i WHERE i.event_id = b.event_id)
     )
     SELECT
       ARRAY(SELECT i.event_id::text FROM skipped s JOIN inbox i ON i.consumer = $1 AND i.event_id = s.event_id) AS seen,
       ARRAY(SELECT d.event_id::text FROM skipped s
               JOIN inbox_deferred d ON d.consumer = $1 AND d.event_id = s.event_id) AS parked,
       ARRAY(SELECT caused_by::text FROM known) AS known,
       ARRAY(SELECT DISTINCT d.topic || chr(31) || d.partition_key FROM inbox_deferred d
               JOIN (SELECT DISTINCT topic, partition_key FROM batch) k
                 ON d.topic = k.topic AND d.partition_key = k.partition_key
              WHERE d.consumer = $1) AS blocked,
       ARRAY(SELECT event_id::text FROM skipped) AS "notInserted",
       (SELECT count(*) FROM inserted)::int AS inserted`,
    values: [consumer, ...inboxColumns(events), events.map(partitionKey), events.map((e) => e.event.caused_by)],
  };
}

/** The events of a batch as the inbox statement sorted them. */
export interface Sorted {
  /** To apply: new, applicable, and given an inbox row by this transaction. */
  fresh: ReceivedEvent[];
  /** To park, in their order; `taken` are those of them the statement gave an inbox row. */
  toPark: ReceivedEvent[];
  taken: string[];
  duplicates: number;
}

/**
 * Sorts a batch into duplicates, events to park and events to apply from what the inbox statement
 * answered: an event waits when its key is blocked or its cause is unknown, and blocks its key.
 */
export function sortRecorded(events: ReceivedEvent[], recorded: Recorded): Sorted {
  if (recorded.inserted === events.length) {
    // Every event got an inbox row of its own: none was seen or parked before, none is twice
    // in the batch, no key is blocked and every cause is handled or earlier in the batch. So
    // all of them apply, as they nearly always do, without sorting them one by one.
    return { fresh: events, toPark: [], taken: [], duplicates: 0 };
  }
  const notInserted = new Set(recorded.notInserted);
  const seen = new Set([...recorded.seen, ...recorded.parked]);
  const known = new Set(recorded.known);
  const blocked = new Set(recorded.blocked);
  const toApply: ReceivedEvent[] = [];
  const toPark: ReceivedEvent[] = [];
  let duplicates = 0;
  for (const item of events) {
    const id = item.event.event_id;
    if (seen.has(id)) {
      duplicates++;
      continue;
    }
    seen.add(id);
    const key = keyOf({ topic: item.message.topic, partition_key: partitionKey(item) });
    const cause = item.event.caused_by;
    if (blocked.has(key) || (cause !== null && !known.has(cause))) {
      blocked.add(key);
      toPark.push(item);
      continue;
    }
    known.add(id);
    toApply.push(item);
  }
  // An event recorded by another transaction since the statement's snapshot is a duplicate.
  const fresh = toApply.filter((e) => !notInserted.has(e.event.event_id));
  duplicates += toApply.length - fresh.length;
  const taken = toPark.map((e) => e.event.event_id).filter((id) => !notInserted.has(id));
  return { fresh, toPark, taken, duplicates };
}
