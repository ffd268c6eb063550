import { canonicalJson, StaleWriteError } from '@onto/shared';
import type pg from 'pg';
import type { Properties } from '../objects/model.js';

/** A checked row of a bulk write: its primary key and its normalised properties. */
export interface BulkRow {
  pk: string;
  properties: Properties;
}

/** What one chunk wrote: each changed row with its version, seq and the state it replaced. */
export interface BulkChange {
  pk: string;
  kind: 'created' | 'updated';
  version: number;
  seq: number;
  before: Properties | null;
  after: Properties;
}

export interface ChunkResult {
  changes: BulkChange[];
  unchanged: number;
  /** The highest seq among the chunk's heads after the write (written or left alone), 0 when none. */
  maxSeq: number;
}

/**
 * Creates or replaces a chunk of objects of one type, set-based: the existing heads are locked
 * (in pk order, so that concurrent bulk writes cannot deadlock on each other), the rows identical
 * to their live head are left alone, the others are upserted into object_heads with the next
 * version and a seq from data_seq taken inside the statement that writes them, and their history
 * rows are appended by the same statement. The pks must be distinct.
 */
export async function writeChunk(
  tx: pg.ClientBase,
  w: { worldId: string; type: string; schemaVersion: number; actor: string; requestId: string },
  rows: BulkRow[],
): Promise<ChunkResult> {
  const pks = rows.map((r) => r.pk);
  const { rows: heads } = await tx.query<{
    pk: string;
    version: number;
    seq: number;
    deleted: boolean;
    properties: Properties | null;
  }>(
    `SELECT pk, version, seq, deleted, properties FROM object_heads
      WHERE world_id = $1 AND type = $2 AND pk = ANY($3::text[])
      ORDER BY pk FOR NO KEY UPDATE`,
    [w.worldId, w.type, pks],
  );
  const byPk = new Map(heads.map((h) => [h.pk, h]));
  const pending: { row: BulkRow; json: string; version: number; before: Properties | null; live: boolean }[] = [];
  let unchanged = 0;
  let maxSeq = 0;
  for (const row of rows) {
    const head = byPk.get(row.pk);
    const live = head !== undefined && !head.deleted;
    const json = canonicalJson(row.properties);
    if (live && head.properties !== null && canonicalJson(head.properties) === json) {
      unchanged++;
      maxSeq = Math.max(maxSeq, Number(head.seq));
      continue;
    }
    pending.push({
      row,
      json,
      version: Number(head?.version ?? 0) + 1,
      before: live ? head.properties : null,
      live,
    });
  }
  if (pending.length === 0) return { changes: [], unchanged, maxSeq };
  // A head that appeared (or moved) since the locking read makes the version check fail: the
  // whole transaction is then retried (StaleWriteError), never a version written backwards.
  const { rows: written } = await tx.query<{ pk: string; seq: string }>(
    `WITH i AS (
       SELECT * FROM unnest($3::text[], $4::bigint[], $5::text[]) AS i(pk, version, properties)
     ), h AS (
       INSERT INTO object_heads AS o (world_id, type, pk, version, seq, deleted, properties, schema_version)
       SELECT $1, $2, i.pk, i.version, nextval('data_seq'), false, i.properties::jsonb, $6 FROM i
       ON CONFLICT (world_id, type, pk) DO UPDATE
          SET version = excluded.version, seq = excluded.seq, deleted = false, properties = excluded.properties,
              schema_version = excluded.schema_version, updated_at = now(),
              created_at = CASE WHEN o.deleted THEN now() ELSE o.created_at END
        WHERE o.version = excluded.version - 1
       RETURNING pk, seq, version, properties
     )
     INSERT INTO object_history
       (world_id, type, pk, seq, version, deleted, properties, schema_version, actor, request_id)
     SELECT $1, $2, h.pk, h.seq, h.version, false, h.properties, $6, $7, $8 FROM h
     RETURNING pk, seq`,
    [
      w.worldId,
      w.type,
      pending.map((p) => p.row.pk),
      pending.map((p) => p.version),
      pending.map((p) => p.json),
      w.schemaVersion,
      w.actor,
      w.requestId,
    ],
  );
  if (written.length !== pending.length) {
    throw new StaleWriteError(`objects of ${w.worldId}/${w.type} were written concurrently with a bulk write`);
  }
  const seqOf = new Map(written.map((r) => [r.pk, Number(r.seq)]));
  const changes = pending.map((p): BulkChange => {
    const seq = seqOf.get(p.row.pk) ?? 0;
    maxSeq = Math.max(maxSeq, seq);
    return {
      pk: p.row.pk,
      kind: p.live ? 'updated' : 'created',
      version: p.version,
      seq,
      before: p.before,
      after: p.row.properties,
    };
  });
  return { changes, unchanged, maxSeq };
}
