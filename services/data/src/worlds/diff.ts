import { createHash } from 'node:crypto';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  AT_PATTERN,
  BadRequest,
  canonicalJson,
  decodeCursor,
  encodeCursor,
  ownValue,
  type Queryable,
  setOwn,
  Unprocessable,
  WORLD_ID,
} from '@onto/shared';
import { type Static, Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { NAME } from '../http/schemas.js';
import type { Properties } from '../objects/model.js';
import { type Interval, intervals, type Point } from './intervals.js';
import { chainOf, resolveRef } from './refs.js';

/*
 * Diffs of worlds (docs/adr/0023): two points — a world at a commit, read up its chain — compared
 * key by key over the keys written between them. For every world of either chain, the writes in
 * the seq interval the two chains read it differently ((lower commit, higher commit], or all it
 * wrote when only one chain reads it) are the candidates; each is then read at both points.
 * Writes found through (world, seq) indexes: the cost follows the changes, not the worlds' size.
 */

const ivValues = (iv: Interval[]) => [
  iv.map((i) => i.world),
  iv.map((i) => i.lo),
  iv.map((i) => i.hi),
  iv.map((i) => i.side),
];
const IV = `iv AS (SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[]) AS iv(world_id, lo, hi, side))`;

type ObjectDiffRow = {
  type: string;
  pk: string;
  sides: string[];
  a_version: string | null;
  a_deleted: boolean | null;
  a_properties: Properties | null;
  b_version: string | null;
  b_deleted: boolean | null;
  b_properties: Properties | null;
};

/** The keys of objects written in the intervals, after `after`, with their states at both points. */
async function objectCandidates(
  db: Queryable,
  iv: Interval[],
  a: Point,
  b: Point,
  type: string | null,
  after: [string, string] | null,
  limit: number,
): Promise<ObjectDiffRow[]> {
  const { rows } = await db.query<ObjectDiffRow>(
    `WITH ${IV},
     written AS (
       SELECT x.type, x.pk, iv.side FROM iv JOIN object_heads x ON x.world_id = iv.world_id AND x.seq > iv.lo AND x.seq <= iv.hi
       UNION ALL
       SELECT x.type, x.pk, iv.side FROM iv JOIN object_history x ON x.world_id = iv.world_id AND x.seq > iv.lo AND x.seq <= iv.hi
     ), keys AS (
       SELECT type, pk, array_agg(DISTINCT side) AS sides FROM written
        WHERE ($5::text IS NULL OR type = $5) AND ($6::text IS NULL OR (type, pk) > ($6, $7))
        GROUP BY type, pk ORDER BY type, pk LIMIT $8
     )
     SELECT k.type, k.pk, k.sides, x.version AS a_version, x.deleted AS a_deleted, x.properties AS a_properties,
            y.version AS b_version, y.deleted AS b_deleted, y.properties AS b_properties
       FROM keys k
       LEFT JOIN LATERAL object_at($9, $10, k.type, k.pk) x ON true
       LEFT JOIN LATERAL object_at($11, $12, k.type, k.pk) y ON true
      ORDER BY k.type, k.pk`,
    [...ivValues(iv), type, after?.[0] ?? null, after?.[1] ?? null, limit, a.world, a.commit, b.world, b.commit],
  );
  return rows;
}

type LinkDiffRow = {
  link_type: string;
  from_pk: string;
  to_pk: string;
  sides: string[];
  a_version: string | null;
  a_deleted: boolean | null;
  b_version: string | null;
  b_deleted: boolean | null;
};

/** The same for links; `type` filters on either end's object type. */
async function linkCandidates(
  db: Queryable,
  iv: Interval[],
  a: Point,
  b: Point,
  type: string | null,
  after: [string, string, string] | null,
  limit: number,
): Promise<LinkDiffRow[]> {
  const { rows } = await db.query<LinkDiffRow>(
    `WITH ${IV},
     written AS (
       SELECT x.link_type, x.from_pk, x.to_pk, iv.side, h.from_type, h.to_type
         FROM iv JOIN link_history x ON x.world_id = iv.world_id AND x.seq > iv.lo AND x.seq <= iv.hi
         JOIN link_heads h ON h.world_id = x.world_id AND h.link_type = x.link_type AND h.from_pk = x.from_pk AND h.to_pk = x.to_pk
     ), keys AS (
       SELECT link_type, from_pk, to_pk, array_agg(DISTINCT side) AS sides FROM written
        WHERE ($5::text IS NULL OR from_type = $5 OR to_type = $5)
          AND ($6::text IS NULL OR (link_type, from_pk, to_pk) > ($6, $7, $8))
        GROUP BY link_type, from_pk, to_pk ORDER BY link_type, from_pk, to_pk LIMIT $9
     )
     SELECT k.link_type, k.from_pk, k.to_pk, k.sides, x.version AS a_version, x.deleted AS a_deleted,
            y.version AS b_version, y.deleted AS b_deleted
       FROM keys k
       LEFT JOIN LATERAL link_at($10, $11, k.link_type, k.from_pk, k.to_pk) x ON true
       LEFT JOIN LATERAL link_at($12, $13, k.link_type, k.from_pk, k.to_pk) y ON true
      ORDER BY k.link_type, k.from_pk, k.to_pk`,
    [
      ...ivValues(iv),
      type,
      after?.[0] ?? null,
      after?.[1] ?? null,
      after?.[2] ?? null,
      limit,
      a.world,
      a.commit,
      b.world,
      b.commit,
    ],
  );
  return rows;
}

type Change = 'added' | 'removed' | 'modified';

/** What changed from `a` to `b` (null: absent), or null when both read the same. */
function changeOf(aLive: boolean, bLive: boolean, same: boolean): Change | null {
  if (aLive && bLive) return same ? null : 'modified';
  if (bLive) return 'added';
  if (aLive) return 'removed';
  return null;
}

/** The properties that differ, each with its old and new value (null: absent). */
function changedProperties(a: Properties | null, b: Properties | null): Record<string, { old: unknown; new: unknown }> {
  const out: Record<string, { old: unknown; new: unknown }> = {};
  for (const name of new Set([...Object.keys(a ?? {}), ...Object.keys(b ?? {})])) {
    // A property only one side has reads as null on the other, `constructor` too.
    const old = (a && ownValue(a, name)) ?? null;
    const next = (b && ownValue(b, name)) ?? null;
    if (canonicalJson(old) !== canonicalJson(next)) setOwn(out, name, { old, new: next });
  }
  return out;
}

const Side = Type.Union([Type.Literal('from'), Type.Literal('to'), Type.Literal('both')], {
  description:
    'which point changed it since the points diverged: `to` (the world, or the later ref), `from` (the other world), both',
});
const ChangeKind = Type.Union([Type.Literal('added'), Type.Literal('removed'), Type.Literal('modified')]);
const Version = Type.Union([Type.Integer(), Type.Null()], { description: 'the version at the point; null: absent' });
const PointBody = Type.Object({
  world: Type.String(),
  commit: Type.Integer({ description: 'the data commit the point reads at' }),
});
const DiffBody = Type.Object({
  from: PointBody,
  to: PointBody,
  commonAncestor: Type.Union([PointBody, Type.Null()], {
    description: 'with `against`: where the two worlds diverged (the fork point)',
  }),
  objects: Type.Array(
    Type.Object({
      type: Type.String(),
      pk: Type.String(),
      change: ChangeKind,
      side: Side,
      fromVersion: Version,
      toVersion: Version,
      properties: Type.Record(Type.String(), Type.Object({ old: Type.Unknown(), new: Type.Unknown() }), {
        description: 'the properties that differ: old (at `from`) and new (at `to`) values, null when absent',
      }),
    }),
  ),
  links: Type.Array(
    Type.Object({
      linkType: Type.String(),
      fromPk: Type.String(),
      toPk: Type.String(),
      change: Type.Union([Type.Literal('added'), Type.Literal('removed')]),
      side: Side,
      fromVersion: Version,
      toVersion: Version,
    }),
  ),
  next: Type.Union([Type.String(), Type.Null()], { description: 'the cursor of the next page' }),
});

const sideOf = (sides: string[]) => (sides.length > 1 ? 'both' : (sides[0] as 'from' | 'to'));

/** `GET /v1/worlds/{world}/diff`: objects and links, added, removed and modified, between two points. */
export default fp(
  async (fastify: FastifyInstance) => {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
    app.get(
      '/v1/worlds/:world/diff',
      {
        preHandler: app.authorize({ role: 'viewer' }),
        schema: {
          tags: ['worlds'],
          summary: 'What changed in a world between two refs, or against another world of its chain',
          description:
            'from=<ref>&to=<ref> (to: now by default): the objects and links of the world that differ between the two refs. against=<world>: the world now against another world of the same chain (its base, a child, a sibling), over what either changed since they diverged; `from` is the other world, `to` this one. A ref is a data commit, an RFC 3339 instant or a tag of the world (its data commit). Paginated with `next` (objects and links each up to `limit` a page); type=<object type> keeps the objects of that type and the links touching it. The schema part of a world diff is control’s (its schema history).',
          params: Type.Object({ world: Type.String({ pattern: WORLD_ID }) }),
          querystring: Type.Object(
            {
              from: Type.Optional(
                Type.String({
                  maxLength: 100,
                  pattern: AT_PATTERN,
                  description: 'a ref: commit, instant or tag of the world',
                }),
              ),
              to: Type.Optional(
                Type.String({
                  maxLength: 100,
                  pattern: AT_PATTERN,
                  description: 'a ref: commit, instant or tag of the world; now by default',
                }),
              ),
              against: Type.Optional(Type.String({ pattern: WORLD_ID, description: 'another world of the chain' })),
              type: Type.Optional(Type.String({ pattern: NAME })),
              cursor: Type.Optional(Type.String({ maxLength: 4096 })),
              limit: Type.Integer({ minimum: 1, maximum: 1000, default: 100 }),
            },
            { additionalProperties: false },
          ),
          response: {
            200: DiffBody,
            400: { $ref: 'Problem#' },
            401: { $ref: 'Problem#' },
            403: { $ref: 'Problem#' },
            404: { $ref: 'Problem#' },
            410: { $ref: 'Problem#' },
            422: { $ref: 'Problem#' },
          },
        },
      },
      async (request) => {
        const { world } = request.params;
        const { from, to, against, type, cursor, limit } = request.query;
        if (against !== undefined && (from !== undefined || to !== undefined)) {
          throw new BadRequest('a diff is between two refs (from, to) or against a world, not both', [
            { path: 'querystring/against', message: 'must not be given with from or to' },
          ]);
        }
        if (against === undefined && from === undefined) {
          throw new BadRequest('a diff needs from=<ref> or against=<world>', [
            { path: 'querystring/from', message: 'is required without against' },
          ]);
        }
        const query = createHash('sha256')
          .update(JSON.stringify([world, from ?? null, to ?? null, against ?? null, type ?? null]))
          .digest('base64url')
          .slice(0, 16);
        // Where the previous page ended, per list: a key, 'done', or null (from the start).
        type Position = { a: number; b: number; o: string[] | 'done' | null; l: string[] | 'done' | null };
        const place = (v: unknown, n: number) =>
          v === null || v === 'done' || (Array.isArray(v) && v.length === n && v.every((x) => typeof x === 'string'));
        const position = decodeCursor<Position>(cursor, (c) =>
          c.q === query && Number.isSafeInteger(c.a) && Number.isSafeInteger(c.b) && place(c.o, 2) && place(c.l, 3)
            ? (c as unknown as Position)
            : undefined,
        );
        // Both points as commits: "now" is data's head when the first page was asked.
        let a: Point;
        let b: Point;
        let commonAncestor: { world: string; commit: number } | null = null;
        if (against !== undefined) {
          await resolveRef(app.pg, world, undefined);
          const exists = await app.pg.query('SELECT 1 FROM worlds WHERE id = $1', [against]);
          if (exists.rowCount === 0) {
            throw new Unprocessable(`world ${against} does not exist here`, [
              { path: 'querystring/against', message: 'must be a world provisioned in data' },
            ]);
          }
          const headNow = position?.b ?? (await currentHead(app.pg));
          a = { world: against, commit: headNow, chain: await chainOf(app.pg, against, headNow) };
          b = { world, commit: headNow, chain: await chainOf(app.pg, world, headNow) };
          const shared = b.chain.find((s) => a.chain.some((t) => t.world === s.world));
          const theirs = a.chain.find((t) => t.world === shared?.world);
          if (!shared || !theirs) {
            throw new Unprocessable(`worlds ${world} and ${against} are not of one chain: they share no base`, [
              {
                path: 'querystring/against',
                message: `must be a world ${world} forks from, one that forks from it, or a sibling`,
              },
            ]);
          }
          commonAncestor = { world: shared.world, commit: Math.min(shared.upTo ?? headNow, theirs.upTo ?? headNow) };
        } else {
          const headNow = await currentHead(app.pg);
          const pa = position ? { commit: position.a } : await resolveRef(app.pg, world, from, 'querystring/from');
          const pb = position
            ? { commit: position.b }
            : to === undefined
              ? { commit: headNow }
              : await resolveRef(app.pg, world, to, 'querystring/to');
          const ca = pa.commit ?? headNow;
          const cb = pb.commit ?? headNow;
          a = { world, commit: ca, chain: await chainOf(app.pg, world, ca) };
          b = { world, commit: cb, chain: await chainOf(app.pg, world, cb) };
        }
        const iv = intervals(a, b);
        const objectsAfter = position?.o ?? null;
        const linksAfter = position?.l ?? null;
        const objects: Static<typeof DiffBody>['objects'] = [];
        let objectsNext: string[] | 'done' = 'done';
        if (objectsAfter !== 'done') {
          const rows = await objectCandidates(
            app.pg,
            iv,
            a,
            b,
            type ?? null,
            objectsAfter as [string, string] | null,
            limit + 1,
          );
          for (const r of rows.slice(0, limit)) {
            const aLive = r.a_version !== null && !r.a_deleted;
            const bLive = r.b_version !== null && !r.b_deleted;
            const props = changedProperties(aLive ? r.a_properties : null, bLive ? r.b_properties : null);
            const change = changeOf(aLive, bLive, Object.keys(props).length === 0);
            if (change === null) continue;
            objects.push({
              type: r.type,
              pk: r.pk,
              change,
              side: sideOf(r.sides),
              fromVersion: aLive ? Number(r.a_version) : null,
              toVersion: bLive ? Number(r.b_version) : null,
              properties: props,
            });
          }
          const last = rows.slice(0, limit).at(-1);
          if (rows.length > limit && last) objectsNext = [last.type, last.pk];
        }
        const links: Static<typeof DiffBody>['links'] = [];
        let linksNext: string[] | 'done' = 'done';
        if (linksAfter !== 'done') {
          const rows = await linkCandidates(
            app.pg,
            iv,
            a,
            b,
            type ?? null,
            linksAfter as [string, string, string] | null,
            limit + 1,
          );
          for (const r of rows.slice(0, limit)) {
            const aLive = r.a_version !== null && !r.a_deleted;
            const bLive = r.b_version !== null && !r.b_deleted;
            const change = changeOf(aLive, bLive, true);
            if (change === null || change === 'modified') continue;
            links.push({
              linkType: r.link_type,
              fromPk: r.from_pk,
              toPk: r.to_pk,
              change,
              side: sideOf(r.sides),
              fromVersion: aLive ? Number(r.a_version) : null,
              toVersion: bLive ? Number(r.b_version) : null,
            });
          }
          const last = rows.slice(0, limit).at(-1);
          if (rows.length > limit && last) linksNext = [last.link_type, last.from_pk, last.to_pk];
        }
        const more = objectsNext !== 'done' || linksNext !== 'done';
        return {
          from: { world: a.world, commit: a.commit },
          to: { world: b.world, commit: b.commit },
          commonAncestor,
          objects,
          links,
          next: more ? encodeCursor({ q: query, a: a.commit, b: b.commit, o: objectsNext, l: linksNext }) : null,
        };
      },
    );
  },
  { name: 'onto-data-diff', dependencies: ['onto-auth', 'onto-data-schema'] },
);

async function currentHead(db: Queryable): Promise<number> {
  const { rows } = await db.query<{ c: string }>(
    'SELECT CASE WHEN is_called THEN last_value ELSE 0 END AS c FROM data_seq',
  );
  return Number(rows[0]?.c ?? 0);
}
