import type { Queryable } from '@onto/shared';

export interface End {
  type: string;
  pk: string;
}

/**
 * Locks the live heads of a link's ends FOR KEY SHARE and says which exist: an object's delete
 * (FOR UPDATE) then waits for the link, or the link for the delete, so no link outlives an end.
 * Updates of the objects (FOR NO KEY UPDATE) do not conflict with it.
 */
export async function lockEnds(
  tx: Queryable,
  worldId: string,
  from: End,
  to: End,
): Promise<{ from: boolean; to: boolean }> {
  const { rows } = await tx.query<{ type: string; pk: string }>(
    `SELECT type, pk FROM object_heads
      WHERE world_id = $1 AND ((type = $2 AND pk = $3) OR (type = $4 AND pk = $5)) AND NOT deleted
      ORDER BY type, pk FOR KEY SHARE`,
    [worldId, from.type, from.pk, to.type, to.pk],
  );
  const has = (e: End) => rows.some((r) => r.type === e.type && r.pk === e.pk);
  return { from: has(from), to: has(to) };
}

export type LinkHead = {
  version: number;
  seq: number;
  deleted: boolean;
};

export async function linkHead(
  tx: Queryable,
  worldId: string,
  linkType: string,
  fromPk: string,
  toPk: string,
  forUpdate: boolean,
): Promise<LinkHead | null> {
  const { rows } = await tx.query<LinkHead>(
    `SELECT version, seq, deleted FROM link_heads
      WHERE world_id = $1 AND link_type = $2 AND from_pk = $3 AND to_pk = $4 ${forUpdate ? 'FOR UPDATE' : ''}`,
    [worldId, linkType, fromPk, toPk],
  );
  return rows[0] ?? null;
}

/** The live link that already takes the one place a side of the link type allows, if any. */
export async function occupant(
  tx: Queryable,
  worldId: string,
  linkType: string,
  side: 'from' | 'to',
  pk: string,
): Promise<{ fromPk: string; toPk: string } | null> {
  const { rows } = await tx.query<{ fromPk: string; toPk: string }>(
    `SELECT from_pk AS "fromPk", to_pk AS "toPk" FROM link_heads
      WHERE world_id = $1 AND link_type = $2 AND ${side === 'from' ? 'from_pk' : 'to_pk'} = $3 AND NOT deleted
      LIMIT 1`,
    [worldId, linkType, pk],
  );
  return rows[0] ?? null;
}

export interface LinkWrite {
  worldId: string;
  linkType: string;
  from: End;
  to: End;
  fromOne: boolean;
  toOne: boolean;
  version: number;
  deleted: boolean;
  actor: string;
  requestId: string;
}

const HISTORY = `INSERT INTO link_history (world_id, link_type, from_pk, to_pk, seq, version, deleted, actor, request_id)
  SELECT $1, $2, $3, $4, h.seq, $9, $10, $11, $12 FROM h RETURNING seq`;

/**
 * Creates, revives or deletes a link (the head is inserted or updated, a history row appended);
 * returns the write's seq, or null when a concurrent writer made the same change first. A second
 * live link where the cardinality allows one violates a partial unique index: 23505.
 */
export async function writeLink(tx: Queryable, w: LinkWrite): Promise<number | null> {
  const { rows } = await tx.query<{ seq: number }>(
    `WITH h AS (
       INSERT INTO link_heads
         (world_id, link_type, from_pk, to_pk, from_type, to_type, from_one, to_one, version, seq, deleted)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, nextval('data_seq'), $10)
       ON CONFLICT (world_id, link_type, from_pk, to_pk) DO UPDATE
         SET version = EXCLUDED.version, seq = EXCLUDED.seq, deleted = EXCLUDED.deleted,
             from_type = EXCLUDED.from_type, to_type = EXCLUDED.to_type,
             from_one = EXCLUDED.from_one, to_one = EXCLUDED.to_one, updated_at = now()
         WHERE link_heads.deleted <> EXCLUDED.deleted
       RETURNING seq
     ) ${HISTORY}`,
    [
      w.worldId,
      w.linkType,
      w.from.pk,
      w.to.pk,
      w.from.type,
      w.to.type,
      w.fromOne,
      w.toOne,
      w.version,
      w.deleted,
      w.actor,
      w.requestId,
    ],
  );
  return rows[0]?.seq ?? null;
}

export type LiveLink = {
  linkType: string;
  fromPk: string;
  toPk: string;
  fromType: string;
  toType: string;
  version: number;
};

/**
 * The live links that touch an object, locked in a stable order (so that two deletes sharing
 * links cannot deadlock): outgoing through `outgoing` link types, incoming through `incoming`.
 */
export async function linksTouching(
  tx: Queryable,
  worldId: string,
  end: End,
  outgoing: string[],
  incoming: string[],
): Promise<LiveLink[]> {
  if (outgoing.length === 0 && incoming.length === 0) return [];
  const { rows } = await tx.query<LiveLink>(
    `SELECT link_type AS "linkType", from_pk AS "fromPk", to_pk AS "toPk", from_type AS "fromType",
            to_type AS "toType", version
       FROM link_heads
      WHERE world_id = $1 AND NOT deleted
        AND ((link_type = ANY($2::text[]) AND from_pk = $4 AND from_type = $5)
          OR (link_type = ANY($3::text[]) AND to_pk = $4 AND to_type = $5))
      ORDER BY link_type, from_pk, to_pk
      FOR UPDATE`,
    [worldId, outgoing, incoming, end.pk, end.type],
  );
  return rows;
}

export type Traversed = {
  pk: string;
  linkVersion: number;
  version: number | null;
  properties: Record<string, unknown> | null;
};

/** A page of the live links of one object through one link type, with the objects at the other end. */
export async function traverse(
  db: Queryable,
  q: {
    worldId: string;
    linkType: string;
    direction: 'outgoing' | 'incoming';
    pk: string;
    otherType: string;
    after: string | null;
    limit: number;
  },
): Promise<Traversed[]> {
  const [self, other] = q.direction === 'outgoing' ? ['from_pk', 'to_pk'] : ['to_pk', 'from_pk'];
  const { rows } = await db.query<Traversed>(
    `SELECT l.${other} AS pk, l.version AS "linkVersion", o.version, o.properties
       FROM link_heads l
       LEFT JOIN object_heads o ON o.world_id = l.world_id AND o.type = $5 AND o.pk = l.${other} AND NOT o.deleted
      WHERE l.world_id = $1 AND l.link_type = $2 AND l.${self} = $3 AND NOT l.deleted
        AND ($4::text IS NULL OR l.${other} > $4)
      ORDER BY l.${other} LIMIT $6`,
    [q.worldId, q.linkType, q.pk, q.after, q.otherType, q.limit],
  );
  return rows;
}
