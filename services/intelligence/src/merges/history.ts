/**
 * The history of a world's definitions (docs/adr/0039): every change appended, in the transaction
 * that makes it, with a seq of one global sequence. A world's position is the greatest seq of its
 * history; its definitions at a position are, per kind and name, the newest row at or below it.
 */
import { canonicalJson, type Queryable } from '@onto/shared';

export const KINDS = ['derived', 'rule', 'decision'] as const;
export type Kind = (typeof KINDS)[number];

/** What a PUT of the definition says, its defaults filled in: the history's and a merge's unit. */
export type Body = Record<string, unknown>;

/** One definition as a point of the history has it. */
export interface Version {
  kind: Kind;
  name: string;
  version: number;
  /** null: deleted at this point. */
  body: Body | null;
  seq: number;
  writtenAt: string;
  /** written_at in microseconds since the epoch, for TIMESTAMP_WINS. */
  at: number;
}

/** (kind, name) as one map key. */
export const keyOf = (kind: Kind, name: string) => `${kind}/${name}`;

export const sameBody = (a: Body | null | undefined, b: Body | null | undefined) =>
  canonicalJson(a ?? null) === canonicalJson(b ?? null);

/** A body without its absent optional fields, as jsonb_strip_nulls leaves the migration's. */
export function bodyOf(fields: Record<string, unknown>): Body {
  return Object.fromEntries(Object.entries(fields).filter(([, v]) => v !== undefined && v !== null));
}

/**
 * Appends one change (body null: deleted); answers its seq. The row keeps the world's data
 * watermark now (the caller holds the world's lock), which places the change on data's scale
 * for a fork at a commit (docs/adr/0045).
 */
export async function recordChange(
  tx: Queryable,
  worldId: string,
  kind: Kind,
  name: string,
  version: number,
  body: Body | null,
): Promise<number> {
  const { rows } = await tx.query<{ seq: string }>(
    `INSERT INTO definition_history (world_id, kind, name, version, body, data_seq)
     VALUES ($1, $2, $3, $4, $5::jsonb, rm_world_seq($1)) RETURNING seq::text`,
    [worldId, kind, name, version, body === null ? null : JSON.stringify(body)],
  );
  return Number(rows[0]?.seq);
}

/**
 * Appends the world's current definitions as its own rows (a fork's copy): the child's history
 * is then self-contained, whatever happens to its base's later.
 */
export async function recordAll(tx: Queryable, worldId: string): Promise<void> {
  await tx.query(
    `INSERT INTO definition_history (world_id, kind, name, version, body, data_seq)
     SELECT world_id, kind, name, version, body, rm_world_seq($1) FROM (
     SELECT world_id, 'derived' AS kind, name, version,
            jsonb_strip_nulls(jsonb_build_object('objectType', object_type, 'expression', expression,
              'aggregates', aggregates, 'maxStalenessMs', max_staleness_ms, 'description', description)) AS body
       FROM derived_definitions WHERE world_id = $1
     UNION ALL
     SELECT world_id, 'rule', name, version,
            jsonb_strip_nulls(jsonb_build_object('objectType', object_type, 'condition', condition,
              'alertType', alert_type, 'severity', severity, 'description', description))
       FROM rules WHERE world_id = $1
     UNION ALL
     SELECT world_id, 'decision', name, version,
            jsonb_strip_nulls(jsonb_build_object('rule', rule, 'alertType', alert_type, 'actionType', action_type,
              'parameters', parameters, 'approval', approval, 'description', description))
       FROM decision_definitions WHERE world_id = $1) defs`,
    [worldId],
  );
}

/** The world's definition position now: the greatest seq of its history (0: none). */
export async function positionOf(db: Queryable, worldId: string): Promise<number> {
  const { rows } = await db.query<{ p: string }>(
    'SELECT coalesce(max(seq), 0)::text AS p FROM definition_history WHERE world_id = $1',
    [worldId],
  );
  return Number(rows[0]?.p ?? 0);
}

/**
 * The newest change of each of the world's definitions at a position, by keyOf; a deleted one has
 * body null (its deletion is a change, with an instant, for TIMESTAMP_WINS).
 */
export async function definitionsAt(db: Queryable, worldId: string, position: number): Promise<Map<string, Version>> {
  const { rows } = await db.query<{
    kind: Kind;
    name: string;
    version: number;
    body: Body | null;
    seq: string;
    writtenAt: string;
    at: string;
  }>(
    // Ordered by the column, not by the text the row answers (which would put 9 after 10).
    `SELECT DISTINCT ON (h.kind, h.name) h.kind, h.name, h.version, h.body, h.seq::text AS seq,
            to_json(h.written_at)#>>'{}' AS "writtenAt", (extract(epoch FROM h.written_at) * 1000000)::bigint::text AS at
       FROM definition_history h WHERE h.world_id = $1 AND h.seq <= $2
      ORDER BY h.kind, h.name, h.seq DESC`,
    [worldId, position],
  );
  const out = new Map<string, Version>();
  for (const r of rows) out.set(keyOf(r.kind, r.name), { ...r, seq: Number(r.seq), at: Number(r.at) });
  return out;
}
