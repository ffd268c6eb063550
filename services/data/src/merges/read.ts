import type { Queryable } from '@onto/shared';
import { type Interval, intervals, type Point } from '../worlds/intervals.js';
import { chainOf } from '../worlds/refs.js';
import type { State } from './classify.js';

/*
 * The set-based reads of a merge (docs/adr/0038): the keys written between the base and each
 * side, found through the (world_id, seq) indexes as a diff finds them (docs/adr/0023), and the
 * states of many keys at a point in one statement each — never a scan of a world, never a round
 * trip per key.
 */

/** A world at a commit, with the chain that commit reads; the empty point has no chain. */
export async function pointOf(db: Queryable, world: string | null, commit: number): Promise<Point> {
  if (world === null) return { world: '', commit, chain: [] };
  return { world, commit, chain: await chainOf(db, world, commit) };
}

export const keyOf = (type: string, pk: string, toPk?: string) =>
  toPk === undefined ? `${type}\u0000${pk}` : `${type}\u0000${pk}\u0000${toPk}`;

export type ObjectKey = {
  type: string;
  pk: string;
};
export type LinkKey = {
  linkType: string;
  fromPk: string;
  toPk: string;
  fromType: string;
  toType: string;
};

const ivParams = (iv: Interval[]) => [iv.map((i) => i.world), iv.map((i) => i.lo), iv.map((i) => i.hi)];
const IV = 'iv AS (SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS iv(world_id, lo, hi))';

/** The writes that can make `side` differ from `base`: every interval the two chains read differently. */
export function changedSince(base: Point, ...sides: Point[]): Interval[] {
  return sides.flatMap((side) => intervals(base, side));
}

/** The object keys written in the intervals, in key order. */
export async function objectCandidates(db: Queryable, iv: Interval[]): Promise<ObjectKey[]> {
  if (iv.length === 0) return [];
  const { rows } = await db.query<ObjectKey>(
    `WITH ${IV}
     SELECT DISTINCT type, pk FROM (
       SELECT x.type, x.pk FROM iv JOIN object_heads x ON x.world_id = iv.world_id AND x.seq > iv.lo AND x.seq <= iv.hi
       UNION ALL
       SELECT x.type, x.pk FROM iv JOIN object_history x ON x.world_id = iv.world_id AND x.seq > iv.lo AND x.seq <= iv.hi
     ) w ORDER BY type, pk`,
    ivParams(iv),
  );
  return rows;
}

/** The link keys written in the intervals, with their ends' object types (from the writer's head). */
export async function linkCandidates(db: Queryable, iv: Interval[]): Promise<LinkKey[]> {
  if (iv.length === 0) return [];
  const { rows } = await db.query<LinkKey>(
    `WITH ${IV}
     SELECT DISTINCT ON (x.link_type, x.from_pk, x.to_pk)
            x.link_type AS "linkType", x.from_pk AS "fromPk", x.to_pk AS "toPk", h.from_type AS "fromType", h.to_type AS "toType"
       FROM iv JOIN link_history x ON x.world_id = iv.world_id AND x.seq > iv.lo AND x.seq <= iv.hi
       JOIN link_heads h ON h.world_id = x.world_id AND h.link_type = x.link_type AND h.from_pk = x.from_pk AND h.to_pk = x.to_pk
      ORDER BY x.link_type, x.from_pk, x.to_pk`,
    ivParams(iv),
  );
  return rows;
}

/** A key's state at a point, with the version that holds it. */
export interface ObjectState {
  state: State;
  version: number;
  seq: number;
  /** 0: the world's own version (its head when read at its current commit); > 0: inherited. */
  depth: number;
}

/**
 * The objects of `keys` at the point, up its chain, in one statement: per key the nearest world
 * of the chain that wrote it at or before its point decides, as object_at does; a key of that
 * world is its head when the head's seq is within the point, else the history row whose interval
 * holds the point. Keys absent at the point are not in the map.
 */
export async function objectsAt(db: Queryable, p: Point, keys: ObjectKey[]): Promise<Map<string, ObjectState>> {
  const out = new Map<string, ObjectState>();
  if (p.chain.length === 0 || keys.length === 0) return out;
  const { rows } = await db.query<{
    type: string;
    pk: string;
    version: string;
    seq: string;
    deleted: boolean;
    properties: State;
    depth: number;
  }>(
    `WITH k AS (SELECT * FROM unnest($1::text[], $2::text[]) AS k(type, pk)),
     ch AS (SELECT * FROM unnest($3::text[], $4::bigint[], $5::int[]) AS ch(world_id, up_to, depth)),
     found AS (
       SELECT k.type, k.pk, ch.depth, h.version, h.seq, h.deleted, h.properties
         FROM k CROSS JOIN ch JOIN object_heads h ON h.world_id = ch.world_id AND h.type = k.type AND h.pk = k.pk AND h.seq <= ch.up_to
       UNION ALL
       SELECT k.type, k.pk, ch.depth, x.version, x.seq, x.deleted, x.properties
         FROM k CROSS JOIN ch JOIN object_history x ON x.world_id = ch.world_id AND x.type = k.type AND x.pk = k.pk
          AND x.seq <= ch.up_to AND x.superseded_seq > ch.up_to
     )
     SELECT DISTINCT ON (type, pk) * FROM found ORDER BY type, pk, depth`,
    [
      keys.map((k) => k.type),
      keys.map((k) => k.pk),
      p.chain.map((s) => s.world),
      p.chain.map((s) => s.upTo ?? p.commit),
      p.chain.map((_, i) => i),
    ],
  );
  for (const r of rows) {
    out.set(keyOf(r.type, r.pk), {
      state: r.deleted ? null : r.properties,
      version: Number(r.version),
      seq: Number(r.seq),
      depth: r.depth,
    });
  }
  return out;
}

export interface LinkState {
  live: boolean;
  version: number;
  seq: number;
  depth: number;
}

/** The links of `keys` at the point, up its chain (link_history holds every version), in one statement. */
export async function linksAt(db: Queryable, p: Point, keys: LinkKey[]): Promise<Map<string, LinkState>> {
  const out = new Map<string, LinkState>();
  if (p.chain.length === 0 || keys.length === 0) return out;
  const { rows } = await db.query<{
    link_type: string;
    from_pk: string;
    to_pk: string;
    version: string;
    seq: string;
    deleted: boolean;
    depth: number;
  }>(
    `WITH k AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) AS k(link_type, from_pk, to_pk)),
     ch AS (SELECT * FROM unnest($4::text[], $5::bigint[], $6::int[]) AS ch(world_id, up_to, depth))
     SELECT DISTINCT ON (k.link_type, k.from_pk, k.to_pk) k.link_type, k.from_pk, k.to_pk, v.version, v.seq, v.deleted, ch.depth
       FROM k CROSS JOIN ch
       CROSS JOIN LATERAL (
         SELECT x.version, x.seq, x.deleted FROM link_history x
          WHERE x.world_id = ch.world_id AND x.link_type = k.link_type AND x.from_pk = k.from_pk AND x.to_pk = k.to_pk
            AND x.seq <= ch.up_to
          ORDER BY x.seq DESC LIMIT 1
       ) v
      ORDER BY k.link_type, k.from_pk, k.to_pk, ch.depth`,
    [
      keys.map((k) => k.linkType),
      keys.map((k) => k.fromPk),
      keys.map((k) => k.toPk),
      p.chain.map((s) => s.world),
      p.chain.map((s) => s.upTo ?? p.commit),
      p.chain.map((_, i) => i),
    ],
  );
  for (const r of rows) {
    out.set(keyOf(r.link_type, r.from_pk, r.to_pk), {
      live: !r.deleted,
      version: Number(r.version),
      seq: Number(r.seq),
      depth: r.depth,
    });
  }
  return out;
}

/** One version of a key on a side since the base: when it was written, and what it held. */
export interface Written {
  seq: number;
  micros: number;
  state: State;
}

/**
 * The versions of `keys` a side wrote after the base (seq > `after`), oldest first, up its chain
 * at its point: what TIMESTAMP_WINS walks, for the conflicting keys only.
 */
export async function versionsSince(
  db: Queryable,
  p: Point,
  after: number,
  keys: ObjectKey[],
): Promise<Map<string, Written[]>> {
  const out = new Map<string, Written[]>();
  if (p.chain.length === 0 || keys.length === 0) return out;
  const { rows } = await db.query<{
    type: string;
    pk: string;
    seq: string;
    micros: string;
    deleted: boolean;
    properties: State;
  }>(
    `WITH k AS (SELECT * FROM unnest($1::text[], $2::text[]) AS k(type, pk)),
     ch AS (SELECT * FROM unnest($3::text[], $4::bigint[]) AS ch(world_id, up_to))
     SELECT v.type, v.pk, v.seq, (extract(epoch FROM v.written_at) * 1000000)::bigint AS micros, v.deleted, v.properties
       FROM k CROSS JOIN ch JOIN object_versions v
         ON v.world_id = ch.world_id AND v.type = k.type AND v.pk = k.pk AND v.seq <= ch.up_to AND v.seq > $5
      ORDER BY v.type, v.pk, v.seq`,
    [
      keys.map((k) => k.type),
      keys.map((k) => k.pk),
      p.chain.map((s) => s.world),
      p.chain.map((s) => s.upTo ?? p.commit),
      after,
    ],
  );
  for (const r of rows) {
    const key = keyOf(r.type, r.pk);
    const list = out.get(key) ?? [];
    out.set(key, list);
    list.push({ seq: Number(r.seq), micros: Number(r.micros), state: r.deleted ? null : r.properties });
  }
  return out;
}
