import type { Queryable, Statement } from '@onto/shared';
import type { Properties } from './model.js';

/*
 * The write core of objects: every statement that writes object_heads and object_history, and the
 * taking of data_seq values, for the single PUT (objects/change.ts, its group commit and its
 * fallback), merges (merges/write.ts) and bulk ingest (bulk/repository.ts). The invariants they
 * keep, in one place:
 *
 * - a writer holds object_heads and object_history ROW EXCLUSIVE (LOCK_HEADS) before it takes a
 *   seq, and takes every seq inside the transaction that writes with it: a commit cut
 *   (storage/commit.ts, docs/adr/0008) waits for it, so every write with `seq <= cut` has ended;
 * - a head holds an object's current version; the version an update supersedes is copied to
 *   object_history by the same statement, with the seq of the write that supersedes it
 *   (keepSuperseded, docs/adr/0017 and 0023); a new head has no history yet;
 * - a key created by someone else meanwhile is a unique violation on object_heads_pkey
 *   (createdMeanwhile): the writer refuses or retries, it never overwrites.
 */

/** Taken first by every writer of heads: inside the commit cut, which locks these tables SHARE. */
export const LOCK_HEADS = 'LOCK TABLE object_heads, object_history IN ROW EXCLUSIVE MODE';

/** The target of the COPYs of new heads, the column order of their lines. */
export const HEAD_COPY =
  'object_heads (world_id, type, pk, version, seq, deleted, properties, schema_version, actor, request_id)';

/** unique_violation on object_heads' primary key: the key was created by someone else meanwhile. */
export const createdMeanwhile = (error: unknown) => {
  const e = error as { code?: unknown; constraint?: unknown } | null;
  return e?.code === '23505' && e.constraint === 'object_heads_pkey';
};

/**
 * `$1` values of data_seq, ascending, as one row (`seqs`, comma-separated; with `also`, more
 * columns of that row). Taken by a writer holding LOCK_HEADS, so inside the commit cut.
 */
export const TAKE_SEQS = (also = '') =>
  `SELECT string_agg(s::text, ',' ORDER BY s) AS seqs${also} FROM (SELECT nextval('data_seq') AS s FROM generate_series(1, $1)) n`;

/** The seqs of TAKE_SEQS' row, checked to be `n`. */
export function seqsOf(row: { seqs: string | null } | undefined, n: number): number[] {
  if (n === 0) return [];
  const seqs = (row?.seqs ?? '').split(',').map(Number);
  if (seqs.length !== n) throw new Error(`took ${seqs.length} seqs for ${n} rows`);
  return seqs;
}

/** `n` values of data_seq in one statement, ascending, taken while the tables are locked (LOCK_HEADS). */
export async function takeSeqs(tx: Queryable, n: number): Promise<number[]> {
  if (n === 0) return [];
  const { rows } = await tx.query<{ seqs: string | null }>(TAKE_SEQS(), [n]);
  return seqsOf(rows[0], n);
}

/**
 * The CTEs (`prev`, `kept`) that copy the heads an UPDATE of the same statement supersedes into
 * history (docs/adr/0017), with the seq of the write that supersedes them (`supersededBy`, an
 * expression over `heads`; docs/adr/0023); `heads` is a FROM list that names them `o`. The
 * statement's snapshot is taken before its UPDATE, so `prev` reads the versions being replaced.
 */
export const keepSuperseded = (heads: string, supersededBy: string) => `prev AS (
     SELECT o.world_id, o.type, o.pk, o.seq, o.version, o.deleted, o.properties, o.schema_version, o.actor,
            o.request_id, o.updated_at, ${supersededBy} AS superseded_seq
       FROM ${heads}
   ), kept AS (
     INSERT INTO object_history
       (world_id, type, pk, seq, version, deleted, properties, schema_version, actor, request_id, written_at,
        superseded_seq)
     SELECT * FROM prev
   )`;

/** One write of a head: an object's next version (or first), by one writer. */
export interface HeadWrite {
  worldId: string;
  type: string;
  pk: string;
  version: number;
  /** null writes a tombstone. */
  properties: Properties | null;
  schemaVersion: number;
  actor: string;
  requestId: string;
}

/** The parameters of INSERT_HEAD and UPDATE_HEAD, $1…$8. */
const headValues = (w: HeadWrite) => [
  w.worldId,
  w.type,
  w.pk,
  w.version,
  w.properties === null ? null : JSON.stringify(w.properties),
  w.schemaVersion,
  w.actor,
  w.requestId,
];

/**
 * The statement of insertHead, its seq from nextval inside the statement: inside the commit cut of
 * docs/adr/0008.
 */
const INSERT_HEAD = `INSERT INTO object_heads (world_id, type, pk, version, seq, deleted, properties, schema_version, actor, request_id)
   VALUES ($1, $2, $3, $4, nextval('data_seq'), $5::jsonb IS NULL, $5::jsonb, $6, $7, $8)
   ON CONFLICT (world_id, type, pk) DO NOTHING
   RETURNING seq`;

/** The next version of a locked head; the version it supersedes goes to history (docs/adr/0017). */
const UPDATE_HEAD = `WITH s AS (SELECT nextval('data_seq') AS seq),
   ${keepSuperseded('object_heads o, s WHERE o.world_id = $1 AND o.type = $2 AND o.pk = $3', 's.seq')}
   UPDATE object_heads
      SET version = $4, seq = (SELECT seq FROM s), deleted = $5::jsonb IS NULL, properties = $5::jsonb,
          schema_version = $6, actor = $7, request_id = $8, updated_at = now(),
          created_at = CASE WHEN deleted THEN now() ELSE created_at END
    WHERE world_id = $1 AND type = $2 AND pk = $3
   RETURNING seq`;

/**
 * A new head (its current version; no history row until it is superseded); the write's seq from
 * data_seq is taken inside the statement that holds the tables' locks (see the commit cut in
 * docs/adr/0008). null when another transaction created the key first.
 */
export async function insertHead(tx: Queryable, w: HeadWrite): Promise<number | null> {
  const { rows } = await tx.query<{ seq: number }>(INSERT_HEAD, headValues(w));
  return rows[0]?.seq ?? null;
}

/** The next version of a head the caller has locked, the superseded one kept in history; returns the write's seq. */
export async function updateHead(tx: Queryable, w: HeadWrite): Promise<number> {
  const { rows } = await tx.query<{ seq: number }>(UPDATE_HEAD, headValues(w));
  const seq = rows[0]?.seq;
  if (seq === undefined) throw new Error(`head ${w.worldId}/${w.type}/${w.pk} vanished under its lock`);
  return seq;
}

const ROWS = `unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::int[], $7::text[], $8::text[], $9::bigint[])
    AS i(world_id, type, pk, version, properties, schema_version, actor, request_id, seq)`;

/** New heads (a key created meanwhile fails the statement: unique_violation); no history yet (docs/adr/0017). */
const INSERT_HEADS = `INSERT INTO object_heads
     (world_id, type, pk, version, seq, deleted, properties, schema_version, actor, request_id)
   SELECT world_id, type, pk, version, seq, false, properties::jsonb, schema_version, actor, request_id FROM ${ROWS}`;

/** Next versions of heads this transaction holds locked; the versions they supersede go to history. */
const UPDATE_HEADS = `WITH i AS (SELECT * FROM ${ROWS}),
   ${keepSuperseded('i JOIN object_heads o ON o.world_id = i.world_id AND o.type = i.type AND o.pk = i.pk', 'i.seq')}
   UPDATE object_heads AS o
      SET version = i.version, seq = i.seq, deleted = false, properties = i.properties::jsonb,
          schema_version = i.schema_version, actor = i.actor, request_id = i.request_id, updated_at = now(),
          created_at = CASE WHEN o.deleted THEN now() ELSE o.created_at END
     FROM i WHERE o.world_id = i.world_id AND o.type = i.type AND o.pk = i.pk`;

function headRows(writes: { change: HeadWrite; seq: number }[]): Statement['values'] {
  return [
    writes.map((x) => x.change.worldId),
    writes.map((x) => x.change.type),
    writes.map((x) => x.change.pk),
    writes.map((x) => x.change.version),
    writes.map((x) => JSON.stringify(x.change.properties)),
    writes.map((x) => x.change.schemaVersion),
    writes.map((x) => x.change.actor),
    writes.map((x) => x.change.requestId),
    writes.map((x) => x.seq),
  ];
}

/** New live heads of any worlds and types, with the seqs the caller took, as one statement (the group commit's). */
export const insertHeadsStatement = (writes: { change: HeadWrite; seq: number }[]): Statement => ({
  text: INSERT_HEADS,
  values: headRows(writes),
});

/** Next live versions of heads the caller holds locked, with the seqs it took, as one statement (the group commit's). */
export const updateHeadsStatement = (writes: { change: HeadWrite; seq: number }[]): Statement => ({
  text: UPDATE_HEADS,
  values: headRows(writes),
});

/**
 * The next versions of heads of one world, given as one JSON array of `{type?, pk, version, seq,
 * props}` (props null or JSON null: a tombstone), each only when its head still is at `version - 1`;
 * the versions they supersede go to history. `type` of each element, or of them all when given
 * here. Answers how many heads it wrote: fewer than asked means some head moved.
 */
export async function replaceHeads(
  tx: Queryable,
  w: { worldId: string; type?: string; schemaVersion: number; actor: string; requestId: string },
  list: string,
): Promise<number> {
  const type = w.type === undefined ? 'u.type' : '$6';
  const values: unknown[] = [w.worldId, w.schemaVersion, list, w.actor, w.requestId];
  if (w.type !== undefined) values.push(w.type);
  const updated = await tx.query(
    `WITH u AS (SELECT * FROM jsonb_to_recordset($3::jsonb) AS u(${w.type === undefined ? 'type text, ' : ''}pk text, version bigint, seq bigint, props jsonb)),
     ${keepSuperseded(`u JOIN object_heads o ON o.world_id = $1 AND o.type = ${type} AND o.pk = u.pk AND o.version = u.version - 1`, 'u.seq')}
     UPDATE object_heads o
        SET version = u.version, seq = u.seq, deleted = u.props IS NULL OR u.props = 'null'::jsonb,
            properties = CASE WHEN u.props = 'null'::jsonb THEN NULL ELSE u.props END, schema_version = $2,
            actor = $4, request_id = $5, updated_at = now(),
            created_at = CASE WHEN o.deleted THEN now() ELSE o.created_at END
       FROM u
      WHERE o.world_id = $1 AND o.type = ${type} AND o.pk = u.pk AND o.version = u.version - 1`,
    values,
  );
  return updated.rowCount ?? 0;
}
