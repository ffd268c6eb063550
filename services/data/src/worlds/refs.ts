import { BadRequest, consistencyToken, HttpProblem, instantTime, type Queryable, Unprocessable } from '@onto/shared';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type pg from 'pg';
import { notProvisioned } from '../schema/lookup.js';
import { cutCommit } from '../storage/commit.js';
import { refuseBeyondHorizon } from '../storage/horizon.js';

/*
 * Refs and chains (docs/adr/0023). A ref of world w is a data commit (data_seq), an RFC 3339
 * instant or a tag of w (the commit data cut for it, docs/adr/0029, 0046); w at commit c reads, per key, w's newest version with seq <= c, else its base's at
 * the fork point, and so on up the chain.
 */

/** One world of a chain and the commit it is read at (null: its current heads). */
export interface Segment {
  world: string;
  upTo: number | null;
}

/** Where a read looks: the world at a commit (null: now), and the chain that commit reads. */
export interface ReadPoint {
  schemaVersion: number;
  commit: number | null;
  chain: Segment[];
}

const DIGITS = /^[0-9]{1,18}$/;
/** RFC 3339 date-time with a required offset (Z or ±hh:mm). */
export const INSTANT = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$/;

/** A tag's name, as control's TAG_NAME: a ref of this shape that is neither a commit nor an instant names a tag. */
const TAG = /^[a-zA-Z0-9][a-zA-Z0-9._-]{0,99}$/;

/**
 * The commit of tag `name` of `world`: the one data cut when it answered the tag's request
 * (docs/adr/0029). data learns tags from those requests (`world.tag.requested`), never from
 * control over HTTP, so a tag control shows as PENDING because data has not answered yet is not
 * known here yet: 404, as for a name that is no tag.
 */
export async function tagCommit(db: Queryable, world: string, name: string, field = 'querystring/at'): Promise<number> {
  const { rows } = await db.query<{ commit: string }>(
    'SELECT commit::text FROM world_tags WHERE world_id = $1 AND name = $2',
    [world, name],
  );
  if (!rows[0]) {
    throw notFoundRef(
      field,
      `no tag ${name} in ${world}: a ref is a commit, an instant or a tag of the world, and data knows a tag once it has positioned it (its vector has \`data\`)`,
    );
  }
  return Number(rows[0].commit);
}

const notFoundRef = (field: string, detail: string) =>
  new HttpProblem(404, 'not-found', 'Not Found', detail, { errors: [{ path: field, message: detail }] });

type WorldRow = {
  provisioned: boolean;
  schema_version: number;
  base_world: string | null;
  created_seq: string;
  provisioned_at: Date | null;
  head: string;
  horizon: string;
};

const WORLD = `SELECT w.id IS NOT NULL AS provisioned, w.base_world, w.created_seq, w.provisioned_at,
        (SELECT coalesce(max(version), 0) FROM schema_versions WHERE world_id = $1) AS schema_version,
        (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM data_seq) AS head,
        (SELECT coalesce(max(horizon_seq), 0) FROM world_retention WHERE world_id = $1) AS horizon
   FROM (SELECT 1) one LEFT JOIN worlds w ON w.id = $1`;

/** The chain world `world` reads at `commit` (null: now), nearest first. */
export async function chainOf(db: Queryable, world: string, commit: number | null): Promise<Segment[]> {
  const { rows } = await db.query<{ world_id: string; up_to: string | null }>(
    'SELECT world_id, up_to FROM world_chain($1, $2) ORDER BY depth',
    [world, commit],
  );
  return rows.map((r) => ({ world: r.world_id, upTo: r.up_to === null ? null : Number(r.up_to) }));
}

/**
 * The greatest commit of the world's chain (read at `upTo`) written at or before `instant`, at
 * least the world's creation: every key of the chain reads the same there as at the instant.
 */
export async function commitAtInstant(
  db: Queryable,
  world: string,
  instant: string,
  createdSeq: number,
  upTo: number,
): Promise<number> {
  const latest = (table: string, time: string) =>
    `(SELECT x.seq FROM ${table} x WHERE x.world_id = ch.world_id AND x.seq <= coalesce(ch.up_to, $3)
         AND x.${time} <= $2::timestamptz ORDER BY x.seq DESC LIMIT 1)`;
  const { rows } = await db.query<{ c: string | null }>(
    `SELECT max(greatest(${latest('object_heads', 'updated_at')}, ${latest('object_history', 'written_at')},
                         ${latest('link_history', 'written_at')}, ${latest('series_batches', 'written_at')})) AS c
       FROM world_chain($1, $3) ch`,
    [world, instant, upTo],
  );
  return Math.max(createdSeq, Number(rows[0]?.c ?? 0));
}

/**
 * Resolves `raw` (a commit, an instant or a tag of the world; undefined: now) for a read of
 * `world` — the one place data resolves refs: every read route, and any new one, calls this.
 * The answers of the contract: malformed 400, a commit ahead of data's head 404, before the
 * world 422, a name that is no tag of the world 404. `field` names the parameter in problems.
 */
export async function resolveRef(
  db: Queryable,
  world: string,
  raw: string | undefined,
  field = 'querystring/at',
): Promise<ReadPoint> {
  const { rows } = await db.query<WorldRow>(WORLD, [world]);
  const w = rows[0];
  if (!w?.provisioned) throw notProvisioned(world);
  const schemaVersion = w.schema_version;
  const createdSeq = Number(w.created_seq);
  if (raw === undefined) {
    // A world without a base reads its own heads alone: no chain to look up.
    const chain = w.base_world === null ? [{ world, upTo: null }] : await chainOf(db, world, null);
    return { schemaVersion, commit: null, chain };
  }
  let commit: number;
  if (DIGITS.test(raw)) {
    commit = Number(raw);
    const head = Number(w.head);
    if (commit > head) {
      throw notFoundRef(field, `no commit ${raw} in ${world}: a ref in the future (data's head is ${head})`);
    }
    if (commit < createdSeq) {
      throw new Unprocessable(`commit ${raw} is before world ${world} existed (its first commit is ${createdSeq})`, [
        { path: field, message: `must be at least ${createdSeq}` },
      ]);
    }
  } else if (INSTANT.test(raw) || /^\d{4}-\d{2}-\d{2}[Tt ]/.test(raw)) {
    const time = instantTime(raw);
    if (time === undefined) {
      throw new BadRequest(`${raw} is not an RFC 3339 instant`, [
        { path: field, message: 'must be a commit (digits) or an RFC 3339 instant with an offset' },
      ]);
    }
    if (time > Date.now()) {
      throw new Unprocessable(`${raw} is in the future`, [{ path: field, message: 'must not be in the future' }]);
    }
    if (w.provisioned_at && time < w.provisioned_at.getTime()) {
      throw new Unprocessable(`world ${world} did not exist at ${raw}`, [
        { path: field, message: `must not be before ${w.provisioned_at.toISOString()}` },
      ]);
    }
    // The instant as given: PostgreSQL keeps its microseconds, a JavaScript Date would not.
    commit = await commitAtInstant(db, world, raw, createdSeq, Number(w.head));
  } else if (TAG.test(raw)) {
    commit = await tagCommit(db, world, raw, field);
  } else {
    throw new BadRequest(`${raw} is not a ref`, [
      { path: field, message: 'must be a data commit (digits), an RFC 3339 instant with an offset or a tag name' },
    ]);
  }
  // Before the retained horizon the history is pruned: 410, unless a kept point (a tag, …) names it.
  await refuseBeyondHorizon(db, world, commit, Number(w.horizon), field);
  return { schemaVersion, commit, chain: await chainOf(db, world, commit) };
}

/**
 * Resolves `raw` as resolveRef does, but a read of now is pinned at a commit cut for it (every
 * write up to it has committed, every later one is after it): the answer reflects exactly the
 * commits up to `commit`, so a client can subscribe to live events from it with no gap and no
 * repeat (`GET …/events?from=<commit>`, docs/adr/0071).
 */
export async function pinnedRef(
  pool: pg.Pool,
  world: string,
  raw: string | undefined,
  field = 'querystring/at',
): Promise<ReadPoint & { commit: number }> {
  if (raw !== undefined) return (await resolveRef(pool, world, raw, field)) as ReadPoint & { commit: number };
  // Resolve first (404 for an unknown world), then cut.
  await resolveRef(pool, world, undefined, field);
  const cut = await cutCommit(pool);
  return (await resolveRef(pool, world, String(cut), field)) as ReadPoint & { commit: number };
}

/** The newest cut `db` has (a replica: the newest it has replayed), if any. */
async function replicaCut(db: pg.Pool): Promise<number | undefined> {
  const { rows } = await db.query<{ commit: string }>('SELECT commit::text FROM replica_cut');
  return rows[0] ? Number(rows[0].commit) : undefined;
}

/**
 * Where a pinned read (a list's or a query's pages, all at one commit) is served, and at which
 * commit: `at` a ref the client named, `commit` the one a cursor or page token carries, neither a
 * commit cut now. A request without a consistency token reads a replica at the newest cut it has
 * (a first page) or at the cursor's commit when the replica's cut has reached it; otherwise, and
 * whenever the replica cannot answer so (the world is younger than its cut), the commit is cut or
 * resolved on the primary and read where it has been replayed (ADR 80).
 */
export async function pinnedRead(
  app: FastifyInstance,
  request: FastifyRequest,
  world: string,
  ref: { at?: string | undefined; commit?: number | null | undefined; atField?: string; commitField: string },
): Promise<{ db: pg.Pool; point: ReadPoint & { commit: number } }> {
  const commit = ref.commit ?? null;
  if (ref.at === undefined && Object.keys(consistencyToken(request)).length === 0) {
    // Tentative: counted once it is used; a fallback below counts as the primary's (or a waited) read.
    const db = await app.readDb(request, { tentative: true });
    if (db !== app.pg) {
      const cut = await replicaCut(db).catch(() => undefined);
      const at = commit ?? cut;
      if (cut !== undefined && at !== undefined && at <= cut) {
        try {
          const point = await resolveRef(db, world, String(at), commit === null ? ref.atField : ref.commitField);
          if (point.commit !== null) {
            app.countReplicaRead();
            return { db, point: point as ReadPoint & { commit: number } };
          }
        } catch {
          // Not answerable there (a world created after the replica's cut): the primary's way.
        }
      }
    }
  }
  const point =
    commit !== null
      ? await pinnedRef(app.pg, world, String(commit), ref.commitField)
      : await pinnedRef(app.pg, world, ref.at, ref.atField);
  return { db: await app.readDb(request, { primaryNow: true }), point };
}
