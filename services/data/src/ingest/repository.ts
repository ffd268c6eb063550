import {
  canonicalJson,
  copyField,
  copyLines,
  EVENT_KEY_MAX,
  enqueueBundles,
  laneOf,
  outboxRows,
  StaleWriteError,
  TOPICS,
  uuidv7,
} from '@onto/shared';
import type pg from 'pg';
import { type ChangeField, type Origin, objectChange, objectChangeTemplate } from '../events.js';
import type { Properties } from '../objects/model.js';

/** A checked row of a bulk write: its primary key and its normalised properties as canonical JSON. */
export interface BulkRow {
  pk: string;
  json: string;
}

export interface BulkResult {
  created: number;
  updated: number;
  unchanged: number;
  /** The highest seq among the heads after the write (written or left alone), 0 when none. */
  seq: number;
}

export interface BulkWriter {
  worldId: string;
  type: string;
  schemaVersion: number;
  origin: Origin;
  topicPrefix: string;
}

/** The fields of a new object's event, but its pk. */
const NEW = { kind: 'created', version: 1, seq: 0, before: null, after: {} } as const;
const UNIQUE_VIOLATION = '23505';
const stale = (w: BulkWriter) =>
  new StaleWriteError(`objects of ${w.worldId}/${w.type} were written concurrently with a bulk write`);

/** A row of the write with what its head, history and event need. */
interface Planned {
  row: BulkRow;
  key: string;
  version: number;
  /** The live head's properties as canonical JSON, or null when the object is new or deleted. */
  before: string | null;
  seq: number;
  /** The properties' canonical JSON escaped for COPY: heads, history and the event's `after`. */
  escaped: string;
}

/**
 * Creates or replaces checked objects (distinct pks) in the caller's transaction. Every row
 * travels once and is written once (docs/adr/0016):
 *
 * 1. the tables are locked ROW EXCLUSIVE, then the existing heads of the pks are locked in pk
 *    order (concurrent bulk writes cannot deadlock on them) and compared here: a row identical to
 *    its live head is left alone;
 * 2. a seq from data_seq per written row, taken after that lock, so that a commit cut
 *    (storage/commit.ts) still waits for this write;
 * 3. new heads by COPY, in pk order (a key created meanwhile is a unique violation: the write is
 *    retried as StaleWriteError), replaced heads by one version-checked UPDATE, history by COPY;
 * 4. the change events, one per written object, as bundles of their lane (outboxBundleInsert):
 *    a row per bundle, not two per event.
 */
export async function writeBulk(tx: pg.PoolClient, w: BulkWriter, rows: BulkRow[]): Promise<BulkResult> {
  const result: BulkResult = { created: 0, updated: 0, unchanged: 0, seq: 0 };
  if (rows.length === 0) return result;
  const keys = TOPICS['onto.changes.objects'];
  rows.sort((a, b) => (a.pk < b.pk ? -1 : a.pk > b.pk ? 1 : 0));
  for (const row of rows) {
    // A key too long for an event: refused as objectChange refuses it.
    const key = keys.key({ worldId: w.worldId, objectType: w.type, pk: row.pk });
    if (key.length > EVENT_KEY_MAX) objectChange({ ...w, ...NEW, pk: row.pk }, w.origin);
  }

  await tx.query('LOCK TABLE object_heads, object_history IN ROW EXCLUSIVE MODE');
  // Which of the pks have a head: first the heads between the least and the greatest of them (in
  // the database's collation), at most as many as the rows. New keys usually find none there,
  // where probing the index for every key costs 3-8 µs a key. When the span holds more heads
  // than that, every key is probed instead.
  let candidates = rows.map((r) => r.pk);
  const { rows: inSpan } = await tx.query<{ pk: string }>(
    `WITH k AS (SELECT min(pk) AS lo, max(pk) AS hi FROM jsonb_array_elements_text($3::jsonb) AS j(pk))
     SELECT h.pk FROM k, object_heads h
      WHERE h.world_id = $1 AND h.type = $2 AND h.pk BETWEEN k.lo AND k.hi LIMIT $4`,
    [w.worldId, w.type, JSON.stringify(candidates), candidates.length],
  );
  if (inSpan.length < candidates.length) {
    const ours = new Set(candidates);
    candidates = inSpan.map((h) => h.pk).filter((pk) => ours.has(pk));
  }
  // Those heads, locked in pk order. The keys as one array (computed once): as a subquery, a
  // planner that thinks the table tiny evaluated it once per head, 14 s for 10,000 keys.
  const { rows: heads } =
    candidates.length === 0
      ? { rows: [] }
      : await tx.query<{
          pk: string;
          version: string;
          seq: string;
          deleted: boolean;
          properties: Properties | null;
        }>(
          `SELECT h.pk, h.version, h.seq, h.deleted, h.properties FROM object_heads h
            WHERE h.world_id = $1 AND h.type = $2 AND h.pk = ANY (ARRAY(SELECT jsonb_array_elements_text($3::jsonb)))
            ORDER BY h.pk FOR NO KEY UPDATE`,
          [w.worldId, w.type, JSON.stringify(candidates)],
        );
  const existing = new Map(heads.map((h) => [h.pk, h]));
  const planned: Planned[] = [];
  for (const row of rows) {
    const h = existing.get(row.pk);
    const before = h && !h.deleted && h.properties !== null ? canonicalJson(h.properties) : null;
    if (h && before === row.json) {
      result.unchanged++;
      result.seq = Math.max(result.seq, Number(h.seq));
      continue;
    }
    const key = keys.key({ worldId: w.worldId, objectType: w.type, pk: row.pk });
    planned.push({ row, key, version: h ? Number(h.version) + 1 : 1, before, seq: 0, escaped: copyField(row.json) });
  }
  if (planned.length === 0) return result;

  const { rows: taken } = await tx.query<{ seqs: string }>(
    `SELECT string_agg(s::text, ',' ORDER BY s) AS seqs FROM (SELECT nextval('data_seq') AS s FROM generate_series(1, $1)) n`,
    [planned.length],
  );
  const seqs = (taken[0]?.seqs ?? '').split(',');
  if (seqs.length !== planned.length) throw new Error(`took ${seqs.length} seqs for ${planned.length} rows`);
  for (const [i, p] of planned.entries()) p.seq = Number(seqs[i]);

  const world = copyField(w.worldId);
  const type = copyField(w.type);
  const schema = String(w.schemaVersion);
  const created = planned.filter((p) => p.version === 1);
  const replaced = planned.filter((p) => p.version > 1);
  try {
    await copyLines(
      tx,
      'object_heads (world_id, type, pk, version, seq, deleted, properties, schema_version)',
      (function* () {
        for (const p of created) {
          yield `${world}\t${type}\t${copyField(p.row.pk)}\t1\t${p.seq}\tf\t${p.escaped}\t${schema}\n`;
        }
      })(),
    );
  } catch (error) {
    // A key created since the locking read (by a writer not yet committed then).
    const { code, constraint } = error as { code?: string; constraint?: string };
    if (code === UNIQUE_VIOLATION && constraint === 'object_heads_pkey') throw stale(w);
    throw error;
  }
  if (replaced.length > 0) {
    const list = replaced.map(
      (p) => `{"pk":${JSON.stringify(p.row.pk)},"version":${p.version},"seq":${p.seq},"props":${p.row.json}}`,
    );
    const updated = await tx.query(
      `UPDATE object_heads o
          SET version = u.version, seq = u.seq, deleted = false, properties = u.props, schema_version = $3,
              updated_at = now(), created_at = CASE WHEN o.deleted THEN now() ELSE o.created_at END
         FROM jsonb_to_recordset($4::jsonb) AS u(pk text, version bigint, seq bigint, props jsonb)
        WHERE o.world_id = $1 AND o.type = $2 AND o.pk = u.pk AND o.version = u.version - 1`,
      [w.worldId, w.type, w.schemaVersion, `[${list.join(',')}]`],
    );
    // The heads are locked, so this holds; a head that moved anyway is never written backwards.
    if (updated.rowCount !== replaced.length) throw stale(w);
  }
  const actor = copyField(w.origin.actor);
  const requestId = copyField(w.origin.requestId);
  await copyLines(
    tx,
    'object_history (world_id, type, pk, seq, version, deleted, properties, schema_version, actor, request_id)',
    (function* () {
      for (const p of planned) {
        yield `${world}\t${type}\t${copyField(p.row.pk)}\t${p.seq}\t${p.version}\tf\t${p.escaped}\t${schema}\t${actor}\t${requestId}\n`;
      }
    })(),
  );

  const template = objectChangeTemplate(w, w.origin, new Date());
  // The constant part of every event: topic and headers, checked as `enqueue` checks them.
  const [outbox] = outboxRows(template.sample, w.topicPrefix);
  if (!outbox) throw new Error('no outbox row');
  // Each field of the template spelled as JSON and escaped for COPY (the properties already are,
  // for the heads and history).
  const fill: Record<ChangeField, (p: Planned, eventId: string) => string> = {
    eventId: (_p, id) => `"${id}"`,
    key: (p) => `"${p.key}"`,
    kind: (p) => (p.before === null ? '"object.created"' : '"object.updated"'),
    version: (p) => String(p.version),
    seq: (p) => String(p.seq),
    pk: (p) => copyField(JSON.stringify(p.row.pk)),
    before: (p) => (p.before === null ? 'null' : copyField(p.before)),
    after: (p) => p.escaped,
  };
  const { parts, fields } = template;
  const events = planned.map((p) => {
    const eventId = uuidv7();
    return { eventId, key: p.key, lane: laneOf(p.key), values: fields.map((f) => fill[f](p, eventId)) };
  });
  await enqueueBundles(tx, { topic: outbox.topic, headers: outbox.headers, parts, escaped: true }, events);

  for (const p of planned) {
    if (p.before === null) result.created++;
    result.seq = Math.max(result.seq, p.seq);
  }
  result.updated = planned.length - result.created;
  return result;
}
