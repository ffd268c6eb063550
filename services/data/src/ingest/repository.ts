import { once } from 'node:events';
import {
  canonicalJson,
  EVENT_KEY_MAX,
  laneOf,
  markOutboxWritten,
  outboxRows,
  StaleWriteError,
  TOPICS,
  uuidv7,
} from '@onto/shared';
import type pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
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

/** Bytes of COPY data handed to the socket at once: few writes, each one costs. */
const COPY_CHUNK = 1 << 20;
/** The fields of a new object's event, but its pk. */
const NEW = { kind: 'created', version: 1, seq: 0, before: null, after: {} } as const;
/** Memory for sorting and holding the staged rows of one request (SET LOCAL). */
const WORK_MEM = '64MB';
const UNIQUE_VIOLATION = '23505';
const stale = (w: BulkWriter) =>
  new StaleWriteError(`objects of ${w.worldId}/${w.type} were written concurrently with a bulk write`);

// A field of COPY's text format: backslash, tab, newline and carriage return escaped.
const COPY_SPECIAL = /[\\\t\n\r]/;
const COPY_ESCAPES: Record<string, string> = { '\\': '\\\\', '\t': '\\t', '\n': '\\n', '\r': '\\r' };
const copyField = (s: string) => (COPY_SPECIAL.test(s) ? s.replace(/[\\\t\n\r]/g, (c) => COPY_ESCAPES[c] ?? c) : s);

// Each variable field of the event body as SQL over the staged row `s` (see objectChangeTemplate).
const FIELD_SQL: Record<ChangeField, string> = {
  eventId: `'"', s.event_id, '"'`,
  key: `'"', s.key, '"'`,
  kind: `CASE WHEN s.before IS NULL THEN '"object.created"' ELSE '"object.updated"' END`,
  version: 's.version',
  seq: 's.seq',
  pk: 's.pk_json',
  before: `coalesce(s.before, 'null')`,
  after: 's.props',
};

/**
 * Copies checked rows into a temporary table of the transaction (COPY, in chunks of COPY_CHUNK
 * bytes, while they are still being checked), with what each one's event needs; answers how many.
 */
export async function stageRows(tx: pg.PoolClient, w: BulkWriter, rows: Iterable<BulkRow>): Promise<number> {
  await tx.query(
    `CREATE TEMPORARY TABLE bulk_rows (
       pk text NOT NULL, pk_json text NOT NULL, props text NOT NULL,
       event_id uuid NOT NULL, key text NOT NULL, lane smallint NOT NULL,
       version bigint NOT NULL DEFAULT 1, before text, unchanged boolean NOT NULL DEFAULT false
     ) ON COMMIT DROP`,
  );
  const stream = tx.query(copyFrom('COPY bulk_rows (pk, pk_json, props, event_id, key, lane) FROM STDIN'));
  let staged = 0;
  let chunk = '';
  try {
    for (const row of rows) {
      const key = TOPICS['onto.changes.objects'].key({ worldId: w.worldId, objectType: w.type, pk: row.pk });
      // A key too long for an event: refused as objectChange refuses it.
      if (key.length > EVENT_KEY_MAX) objectChange({ ...w, ...NEW, pk: row.pk }, w.origin);
      chunk += `${copyField(row.pk)}\t${copyField(JSON.stringify(row.pk))}\t${copyField(row.json)}\t${uuidv7()}\t${key}\t${laneOf(key)}\n`;
      staged++;
      if (chunk.length >= COPY_CHUNK) {
        if (!stream.write(chunk)) await once(stream, 'drain');
        chunk = '';
      }
    }
  } catch (error) {
    // CopyFail, so that the connection leaves COPY and the transaction can roll back.
    stream.destroy(error as Error);
    await once(stream, 'close').catch(() => {});
    throw error;
  }
  stream.end(chunk);
  await once(stream, 'finish');
  return staged;
}

/**
 * Creates or replaces the staged objects (distinct pks) in the caller's transaction, set-based:
 * the existing heads are locked in pk order (so that concurrent bulk writes cannot deadlock on
 * each other) and compared in the database, and one statement then inserts the new heads and
 * upserts the replaced ones in pk order (each with the next version and a seq from data_seq),
 * appends their history and enqueues one change event per written object — its body, canonical
 * JSON, put together in SQL around the seq. A row identical to its live head is left alone.
 */
export async function writeStaged(tx: pg.PoolClient, w: BulkWriter, staged: number): Promise<BulkResult> {
  const result: BulkResult = { created: 0, updated: 0, unchanged: 0, seq: 0 };
  if (staged === 0) return result;
  const template = objectChangeTemplate(w, w.origin, new Date());
  // The constant part of every row: topic, headers — as `enqueue` would write them.
  const [outbox] = outboxRows(template.sample, w.topicPrefix);
  if (!outbox) throw new Error('no outbox row');

  // The existing heads, locked in pk order; whether each is identical is decided by jsonb equality.
  const { rows: heads } = await tx.query<{
    pk: string;
    version: string;
    seq: string;
    live: boolean;
    same: boolean;
    properties: Properties | null;
  }>(
    `SELECT h.pk, h.version, h.seq, NOT h.deleted AS live, NOT h.deleted AND h.properties = b.props::jsonb AS same,
            CASE WHEN NOT h.deleted AND h.properties <> b.props::jsonb THEN h.properties END AS properties
       FROM bulk_rows b JOIN object_heads h ON h.world_id = $1 AND h.type = $2 AND h.pk = b.pk
      ORDER BY h.pk FOR NO KEY UPDATE OF h`,
    [w.worldId, w.type],
  );
  if (heads.length > 0) {
    const pks: string[] = [];
    const versions: number[] = [];
    const befores: (string | null)[] = [];
    const same: boolean[] = [];
    for (const h of heads) {
      if (h.same) {
        result.unchanged++;
        result.seq = Math.max(result.seq, Number(h.seq));
      }
      pks.push(h.pk);
      versions.push(Number(h.version) + 1);
      befores.push(h.live && h.properties !== null ? canonicalJson(h.properties) : null);
      same.push(h.same);
    }
    await tx.query(
      `UPDATE bulk_rows b SET version = u.version, before = u.before, unchanged = u.same
         FROM unnest($1::text[], $2::bigint[], $3::text[], $4::boolean[]) AS u(pk, version, before, same)
        WHERE b.pk = u.pk`,
      [pks, versions, befores, same],
    );
  }
  if (result.unchanged === staged) return result;

  const params: unknown[] = [w.worldId, w.type, w.schemaVersion, w.origin.actor, w.origin.requestId, outbox.topic];
  params.push(outbox.headers);
  const body = template.parts
    .flatMap((part, i) => {
      params.push(part);
      const field = template.fields[i];
      return field ? [`$${params.length}::text`, FIELD_SQL[field]] : [`$${params.length}::text`];
    })
    .join(', ');
  // Sorting and keeping the staged rows in memory rather than in temporary files.
  await tx.query(`SET LOCAL work_mem = '${WORK_MEM}'`);
  let counted: { staged: number; written: number; created: number; seq: string | null }[];
  try {
    ({ rows: counted } = await tx.query(
      `WITH s AS MATERIALIZED (
         SELECT b.*, b.props::jsonb AS doc, nextval('data_seq') AS seq
           FROM bulk_rows b WHERE NOT b.unchanged ORDER BY b.pk
       ), created AS (
         INSERT INTO object_heads (world_id, type, pk, version, seq, deleted, properties, schema_version)
         SELECT $1, $2, s.pk, s.version, s.seq, false, s.doc, $3 FROM s WHERE s.version = 1
         RETURNING 1
       ), replaced AS (
         INSERT INTO object_heads AS o (world_id, type, pk, version, seq, deleted, properties, schema_version)
         SELECT $1, $2, s.pk, s.version, s.seq, false, s.doc, $3 FROM s WHERE s.version > 1
         ON CONFLICT (world_id, type, pk) DO UPDATE
            SET version = excluded.version, seq = excluded.seq, deleted = false, properties = excluded.properties,
                schema_version = excluded.schema_version, updated_at = now(),
                created_at = CASE WHEN o.deleted THEN now() ELSE o.created_at END
          WHERE o.version = excluded.version - 1
         RETURNING 1
       ), history AS (
         INSERT INTO object_history
           (world_id, type, pk, seq, version, deleted, properties, schema_version, actor, request_id)
         SELECT $1, $2, s.pk, s.seq, s.version, false, s.doc, $3, $4, $5 FROM s
       ), added AS (
         INSERT INTO outbox (event_id, topic, partition_key, lane, body, headers)
         SELECT s.event_id, $6, s.key, s.lane, concat(${body}), $7::jsonb FROM s ORDER BY s.event_id
         RETURNING id, lane
       ), queued AS (
         INSERT INTO outbox_pending (lane, id) SELECT lane, id FROM added
       )
       SELECT (SELECT count(*)::int FROM s) AS staged,
              (SELECT count(*)::int FROM created) + (SELECT count(*)::int FROM replaced) AS written,
              (SELECT count(*)::int FROM s WHERE s.before IS NULL) AS created, (SELECT max(seq) FROM s) AS seq`,
      params,
    ));
  } catch (error) {
    // A key created since the locking read (by a writer not yet committed then).
    const { code, constraint } = error as { code?: string; constraint?: string };
    if (code === UNIQUE_VIOLATION && constraint === 'object_heads_pkey') throw stale(w);
    throw error;
  }
  const c = counted[0];
  // A head that moved since the locking read fails the version check: the whole transaction is
  // then retried (StaleWriteError), never a version written backwards.
  if (!c || c.written !== c.staged) throw stale(w);
  markOutboxWritten(tx);
  result.created = c.created;
  result.updated = c.staged - c.created;
  result.seq = Math.max(result.seq, Number(c.seq ?? 0));
  return result;
}
