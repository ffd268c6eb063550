import type { Queryable } from '@onto/shared';

export interface End {
  type: string;
  pk: string;
}

// Advisory lock namespace of objects a fork inherited ("inhr"): linking one takes it shared,
// deleting one (a tombstone with no row to lock before it) exclusively (docs/adr/0023).
const INHERITED_SPACE = 0x696e6872;

/** Takes the lock that stands in for the row lock of an object the fork has no head of. */
export async function lockInherited(tx: Queryable, worldId: string, end: End, exclusive: boolean): Promise<void> {
  await tx.query(
    `SELECT pg_advisory_xact_lock${exclusive ? '' : '_shared'}($1, hashtext($2 || '/' || $3 || '/' || $4))`,
    [INHERITED_SPACE, worldId, end.type, end.pk],
  );
}

/**
 * Locks the heads of a link's ends FOR KEY SHARE and says which are live: an object's delete
 * (FOR UPDATE) then waits for the link, or the link for the delete, so no link outlives an end.
 * Updates of the objects (FOR NO KEY UPDATE) do not conflict with it. In a fork, an end it has
 * no head of is its base's (inherited), held by lockInherited instead.
 */
export async function lockEnds(
  tx: Queryable,
  worldId: string,
  from: End,
  to: End,
  forked = false,
): Promise<{ from: boolean; to: boolean }> {
  const { rows } = await tx.query<{ type: string; pk: string; deleted: boolean }>(
    `SELECT type, pk, deleted FROM object_heads
      WHERE world_id = $1 AND ((type = $2 AND pk = $3) OR (type = $4 AND pk = $5))
      ORDER BY type, pk FOR KEY SHARE`,
    [worldId, from.type, from.pk, to.type, to.pk],
  );
  const alive = async (e: End): Promise<boolean> => {
    const own = rows.find((r) => r.type === e.type && r.pk === e.pk);
    if (own) return !own.deleted;
    if (!forked) return false;
    await lockInherited(tx, worldId, e, false);
    const { rows: now } = await tx.query<{ deleted: boolean }>('SELECT deleted FROM object_at($1, NULL, $2, $3)', [
      worldId,
      e.type,
      e.pk,
    ]);
    return now[0] !== undefined && !now[0].deleted;
  };
  return { from: await alive(from), to: await alive(to) };
}

/**
 * The live links of world $1 read at commit $2 (NULL: now) up the chain, `where` over
 * link_history `x`: per link, the nearest world of the chain that wrote it decides, its newest
 * version at that world's commit (link_history holds every version). `depth` 0: the world's own.
 */
export const chainLinksSql = (where: string) => `SELECT * FROM (
    SELECT DISTINCT ON (x.link_type, x.from_pk, x.to_pk)
           x.link_type, x.from_pk, x.to_pk, x.version, x.deleted, ch.depth, ch.world_id AS source
      FROM world_chain($1, $2) ch
      JOIN link_history x ON x.world_id = ch.world_id AND (ch.up_to IS NULL OR x.seq <= ch.up_to)
     WHERE ${where}
     ORDER BY x.link_type, x.from_pk, x.to_pk, ch.depth, x.seq DESC
  ) l WHERE NOT l.deleted`;

export type LinkHead = {
  version: number;
  seq: number;
  deleted: boolean;
  /** A fork's view of a link it never wrote: its base's at the fork point. */
  inherited?: boolean;
};

export async function linkHead(
  tx: Queryable,
  worldId: string,
  linkType: string,
  fromPk: string,
  toPk: string,
  forUpdate: boolean,
  forked = false,
): Promise<LinkHead | null> {
  const { rows } = await tx.query<LinkHead>(
    `SELECT version, seq, deleted FROM link_heads
      WHERE world_id = $1 AND link_type = $2 AND from_pk = $3 AND to_pk = $4 ${forUpdate ? 'FOR UPDATE' : ''}`,
    [worldId, linkType, fromPk, toPk],
  );
  if (rows[0] || !forked) return rows[0] ?? null;
  const { rows: inherited } = await tx.query<{ version: string; seq: string; deleted: boolean }>(
    `SELECT a.version, a.seq, a.deleted FROM worlds f CROSS JOIN LATERAL link_at(f.base_world, f.base_seq, $2, $3, $4) a
      WHERE f.id = $1`,
    [worldId, linkType, fromPk, toPk],
  );
  const row = inherited[0];
  return row ? { version: Number(row.version), seq: Number(row.seq), deleted: row.deleted, inherited: true } : null;
}

/** The live link that already takes the one place a side of the link type allows, if any. */
export async function occupant(
  tx: Queryable,
  worldId: string,
  linkType: string,
  side: 'from' | 'to',
  pk: string,
  forked = false,
): Promise<{ fromPk: string; toPk: string } | null> {
  if (forked) {
    const column = side === 'from' ? 'from_pk' : 'to_pk';
    const { rows } = await tx.query<{ fromPk: string; toPk: string }>(
      `SELECT from_pk AS "fromPk", to_pk AS "toPk" FROM (${chainLinksSql(`x.link_type = $3 AND x.${column} = $4`)}) c LIMIT 1`,
      [worldId, null, linkType, pk],
    );
    return rows[0] ?? null;
  }
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
  forked = false,
): Promise<LiveLink[]> {
  if (outgoing.length === 0 && incoming.length === 0) return [];
  const own = await ownLinksTouching(tx, worldId, end, outgoing, incoming);
  if (!forked) return own;
  // The links the fork inherited and never wrote: its base's at the fork point.
  const { rows: inherited } = await tx.query<LiveLink>(
    `SELECT l.link_type AS "linkType", l.from_pk AS "fromPk", l.to_pk AS "toPk", h.from_type AS "fromType",
            h.to_type AS "toType", l.version::int AS version
       FROM (${chainLinksSql(`((x.link_type = ANY($3::text[]) AND x.from_pk = $5) OR (x.link_type = ANY($4::text[]) AND x.to_pk = $5))`)}) l
       JOIN link_heads h ON h.world_id = l.source AND h.link_type = l.link_type AND h.from_pk = l.from_pk AND h.to_pk = l.to_pk
      WHERE l.depth > 0 AND ((l.link_type = ANY($3::text[]) AND h.from_type = $6) OR (l.link_type = ANY($4::text[]) AND h.to_type = $6))
      ORDER BY 1, 2, 3`,
    [worldId, null, outgoing, incoming, end.pk, end.type],
  );
  return [...own, ...inherited];
}

async function ownLinksTouching(
  tx: Queryable,
  worldId: string,
  end: End,
  outgoing: string[],
  incoming: string[],
): Promise<LiveLink[]> {
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
    /** Read up the chain at this commit (null: now); absent: the world's own current links. */
    chain?: { commit: number | null };
  },
): Promise<Traversed[]> {
  const [self, other] = q.direction === 'outgoing' ? ['from_pk', 'to_pk'] : ['to_pk', 'from_pk'];
  if (q.chain) {
    const { rows } = await db.query<Traversed>(
      `SELECT l.${other} AS pk, l.version::int AS "linkVersion", o.version::int AS version, o.properties
         FROM (${chainLinksSql(`x.link_type = $3 AND x.${self} = $4 AND ($5::text IS NULL OR x.${other} > $5)`)}) l
         LEFT JOIN LATERAL (
           SELECT a.version, a.properties FROM object_at($1, $2, $6, l.${other}) a WHERE NOT a.deleted
         ) o ON true
        ORDER BY l.${other} LIMIT $7`,
      [q.worldId, q.chain.commit, q.linkType, q.pk, q.after, q.otherType, q.limit],
    );
    return rows;
  }
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
