/**
 * Refs in intelligence's reads (`?at=`, docs/adr/0046, 0069): the one place intelligence resolves
 * them, for every read route that takes one. A ref is a data commit, an RFC 3339 instant or a tag
 * of the world; a tag reads at the commit data cut for it, and an instant at the last commit of the
 * world's chain data wrote at or before it, so `?at=<tag>`, `?at=<instant>` and `?at=<the commit>`
 * answer the same, in intelligence as in data. Tags and commit times are learnt from the events
 * intelligence already consumes (control's `world.tag.requested`, data's `world.tag.positioned`,
 * `world.provisioned` and change events' `writtenAt`), never asked of another service.
 */
import {
  awaitApplied,
  BadRequest,
  HttpProblem,
  instantTime,
  type Queryable,
  Unavailable,
  Unprocessable,
} from '@onto/shared';
import { refuseBeyondHorizon } from '../readmodel/retention.js';

/** A read point: the data commit, and the world's own write intelligence must have applied to answer at it. */
export interface At {
  commit: number;
  /** The world's own newest write at or before `commit` as far as intelligence can bound it (never above it). */
  needs: number;
}

const COMMIT = /^[0-9]{1,15}$/;
const INSTANT_LIKE = /^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ]/;
/** A tag's name, as control's TAG_NAME. */
const TAG = /^[a-zA-Z0-9][a-zA-Z0-9._-]{0,99}$/;

const problem = (status: 404 | 409, detail: string, field: string, message: string) =>
  new HttpProblem(
    status,
    status === 404 ? 'not-found' : 'conflict',
    status === 404 ? 'Not Found' : 'Conflict',
    detail,
    {
      errors: [{ path: field, message }],
    },
  );

type TagRow = { commit: string | null; written: string | null };

async function tagOf(db: Queryable, world: string, name: string): Promise<TagRow | undefined> {
  const { rows } = await db.query<TagRow>(
    'SELECT commit::text, written::text FROM world_tags WHERE world_id = $1 AND name = $2 AND NOT deleted',
    [world, name],
  );
  return rows[0];
}

/**
 * The own write a read at commit c needs applied: c itself, unless a tag of the world at or after
 * c says the world's newest write up to the tag was earlier (a tag's commit is data's global
 * head, rarely a write of this world, and a world with no later write would never reach it).
 */
async function needsAt(db: Queryable, world: string, commit: number): Promise<number> {
  const { rows } = await db.query<{ written: string | null }>(
    `SELECT written::text FROM world_tags WHERE world_id = $1 AND commit >= $2 AND written IS NOT NULL
      ORDER BY commit LIMIT 1`,
    [world, commit],
  );
  const written = rows[0]?.written;
  return written === undefined || written === null ? commit : Math.min(commit, Number(written));
}

/**
 * The commit an instant names in `world`, as data's commitAtInstant: the greatest commit of the
 * world's chain (each base up to its fork point) data wrote at or before it, at least the world's
 * first commit. From the commit times intelligence has applied (migration 021): a write not
 * applied yet is not counted, as in any read without a consistency token. An instant before data
 * provisioned the world, or in the future, is 422, as in data.
 */
async function commitAtInstant(db: Queryable, world: string, raw: string, field: string): Promise<number> {
  const time = instantTime(raw);
  if (time === undefined) {
    throw new BadRequest(`${raw} is not an RFC 3339 instant`, [
      { path: field, message: 'must be a commit (digits) or an RFC 3339 instant with an offset' },
    ]);
  }
  if (time > Date.now()) {
    throw new Unprocessable(`${raw} is in the future`, [{ path: field, message: 'must not be in the future' }]);
  }
  const { rows } = await db.query<{ created_seq: string | null; created_at: Date | null; c: string | null }>(
    `SELECT s.created_seq::text, s.created_at,
            (SELECT max(t.seq) FROM rm_chain_at($1, NULL) ch
               CROSS JOIN LATERAL (SELECT x.seq FROM rm_commit_times x
                                    WHERE x.world_id = ch.world_id AND (ch.point IS NULL OR x.seq <= ch.point)
                                      AND x.written_at <= $2::timestamptz
                                    ORDER BY x.seq DESC LIMIT 1) t)::text AS c
       FROM (SELECT 1) one LEFT JOIN data_world_starts s ON s.world_id = $1`,
    [world, raw],
  );
  const row = rows[0];
  // Compared as data compares it (milliseconds), so both refuse the same instants.
  if (row?.created_at && time < row.created_at.getTime()) {
    throw new Unprocessable(`world ${world} did not exist at ${raw}`, [
      { path: field, message: `must not be before ${row.created_at.toISOString()}` },
    ]);
  }
  return Math.max(Number(row?.created_seq ?? 0), Number(row?.c ?? 0));
}

/**
 * Resolves `raw` for a read of `world`: a commit, an instant (the commit data resolves it to) or
 * a tag of the world (its data commit; a tag whose commit data has not reported yet waits,
 * bounded by `boundMs`, then 409). Answers: malformed 400, an instant in the future or before the
 * world 422, a name that is no tag of the world 404. `field` names the parameter in problems.
 */
export async function resolveAt(
  db: Queryable,
  world: string,
  raw: string,
  boundMs: number,
  field = 'querystring/at',
): Promise<At> {
  if (/^[0-9]+$/.test(raw)) {
    if (!COMMIT.test(raw))
      throw new BadRequest(`${raw} is not a commit`, [{ path: field, message: 'a commit has at most 15 digits' }]);
    const commit = Number(raw);
    // Before the retained horizon the versioned read model is pruned: 410 unless a kept point names it.
    await refuseBeyondHorizon(db, world, commit, field);
    return { commit, needs: await needsAt(db, world, commit) };
  }
  if (INSTANT_LIKE.test(raw)) {
    const commit = await commitAtInstant(db, world, raw, field);
    await refuseBeyondHorizon(db, world, commit, field);
    // The commit is one intelligence has applied (or the world's start): nothing to wait for.
    return { commit, needs: 0 };
  }
  if (!TAG.test(raw)) {
    throw new BadRequest(`${raw} is not a ref`, [
      { path: field, message: 'must be a data commit (digits), an RFC 3339 instant with an offset or a tag name' },
    ]);
  }
  let tag = await tagOf(db, world, raw);
  if (!tag) {
    throw problem(
      404,
      `no tag ${raw} in ${world}`,
      field,
      `no tag ${raw} in world ${world} (intelligence knows a tag once it has consumed control's request for it)`,
    );
  }
  if (tag.commit === null) {
    try {
      await awaitApplied(
        async () => {
          tag = await tagOf(db, world, raw);
          return tag?.commit === null || tag === undefined ? 0 : 1;
        },
        1,
        { boundMs, poll: { initialMs: 5, maxMs: 100 } },
        () => `tag ${raw} of ${world} is PENDING`,
      );
    } catch (error) {
      if (!(error instanceof Unavailable)) throw error;
      throw problem(
        409,
        `tag ${raw} of ${world} is still PENDING: data has not reported its commit`,
        field,
        `tag ${raw} waits for data's position; retry once the tag is COMPLETE`,
      );
    }
    if (!tag?.commit) throw problem(404, `no tag ${raw} in ${world}`, field, `tag ${raw} of ${world} was replaced`);
  }
  const commit = Number(tag.commit);
  return { commit, needs: tag.written === null ? commit : Math.min(commit, Number(tag.written)) };
}

/**
 * The fork point in the base (docs/adr/0045), read under the base's lock: its definition
 * position `p` and its `moment` (the last intelligence_seq: every alert the base raised or
 * cleared by then has a seq at or below it).
 * - No ref (now): the base's position and moment now.
 * - A commit c (a tag arrives as its commit): the changes made while the base's data watermark
 *   was at most c (within a world they are a prefix of its history, since definition writes and
 *   watermark advances hold its lock) — the definitions the values a fork at c inherits
 *   (valid_seq <= c) were computed with — but none after the first *anchor* at or after c: a tag
 *   of the base (its position and moment when intelligence took its request) or an earlier fork
 *   of it. Without an anchor, a change the base made later with no data write in between would
 *   count as "at c" too, and a fork at a tag would take definitions and alerts made after the tag.
 * - An instant: the last change written at or before it.
 * Never past the position now: a change the base makes after this transaction is after the fork.
 */
export const FORK_POINT = `anchor AS (
       SELECT x.definitions, x.moment FROM (
         SELECT t.commit, t.definitions, t.moment FROM world_tags t
          WHERE $3::bigint IS NOT NULL AND t.world_id = $1 AND t.commit >= $3 AND t.definitions IS NOT NULL
         UNION ALL
         SELECT b.base_seq, f.definitions, f.moment FROM fork_points f JOIN world_bases b ON b.world_id = f.world_id
          WHERE $3::bigint IS NOT NULL AND f.base_world = $1 AND b.base_seq >= $3
       ) x ORDER BY x.commit, x.definitions LIMIT 1
     ), point AS (
       SELECT (SELECT coalesce(max(h.seq), 0) FROM definition_history h
                WHERE h.world_id = $1 AND ($3::bigint IS NULL OR h.data_seq <= $3)
                  AND ($4::timestamptz IS NULL OR h.written_at <= $4)
                  AND h.seq <= coalesce((SELECT definitions FROM anchor), h.seq)) AS p,
              coalesce((SELECT moment FROM anchor),
                       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM intelligence_seq)) AS moment
     )`;

/**
 * Intelligence's own state "at" data commit `commit` of `world` (docs/adr/0045, 0046): the
 * definition position and the moment a fork of the world at that commit would start from. Reads
 * at a ref list definitions, alerts and decisions as of this point, so that a read at a ref and a
 * fork at it see the same.
 */
export async function stateAt(
  db: Queryable,
  world: string,
  commit: number,
): Promise<{ definitions: number; moment: number }> {
  const { rows } = await db.query<{ definitions: string; moment: string }>(
    `WITH ${FORK_POINT}, unused AS (SELECT $2::text)
     SELECT p::text AS definitions, moment::text FROM point`,
    [world, null, commit, null],
  );
  return { definitions: Number(rows[0]?.definitions ?? 0), moment: Number(rows[0]?.moment ?? 0) };
}
