/**
 * Refs in intelligence's reads (`?at=`, docs/adr/0046): the one place intelligence resolves
 * them, for every read route that takes one. A ref is a data commit or a tag of the world; a tag
 * reads at the commit data cut for it, so `?at=<tag>` and `?at=<its commit>` answer the same, in
 * intelligence as in data. Tags are learnt from the events intelligence already consumes
 * (control's `world.tag.requested`, data's `world.tag.positioned`), never asked of control.
 */
import { awaitApplied, BadRequest, HttpProblem, type Queryable, Unavailable, Unprocessable } from '@onto/shared';
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
 * Resolves `raw` for a read of `world`: a commit, or a tag of the world (its data commit; a tag
 * whose commit data has not reported yet waits, bounded by `boundMs`, then 409). Answers:
 * malformed 400, an instant 422 (intelligence does not know data's write times: data resolves
 * instants), a name that is no tag of the world 404. `field` names the parameter in problems.
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
    throw new Unprocessable(`intelligence reads at a data commit or a tag, not at an instant (${raw})`, [
      {
        path: field,
        message:
          "must be a data commit or a tag of the world: intelligence does not know data's write times; data resolves an instant (?at= on data's reads)",
      },
    ]);
  }
  if (!TAG.test(raw)) {
    throw new BadRequest(`${raw} is not a ref`, [
      { path: field, message: 'must be a data commit (digits) or a tag name' },
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
