import { HttpProblem, type Queryable } from '@onto/shared';

/* The retained horizon of a world and the points below it still read (docs/adr/0072). */

/** The commits of `world` below its horizon that are still read (see above). */
export async function keptPoints(db: Queryable, world: string): Promise<number[]> {
  const { rows } = await db.query<{ p: string }>(
    `SELECT commit AS p FROM world_tags WHERE world_id = $1
     UNION SELECT base_seq FROM worlds WHERE base_world = $1
     UNION SELECT base_seq FROM merges WHERE base_world = $1 AND status IN ('planned', 'applied')
     UNION SELECT source_seq FROM merges WHERE source = $1 AND status IN ('planned', 'applied')
     UNION SELECT target_seq FROM merges WHERE target = $1 AND status IN ('planned', 'applied')
     UNION SELECT commit_seq FROM merges WHERE target = $1 AND status = 'applied' AND commit_seq IS NOT NULL
     UNION SELECT commit FROM history_pins WHERE world_id = $1 AND expires_at > now()`,
    [world],
  );
  return rows.map((r) => Number(r.p)).sort((a, b) => a - b);
}

/**
 * 410 Gone for a read of `world` at `commit` below its horizon, unless a kept point names it. The
 * problem names the parameter (`at`, or the cursor or page token that carried the commit).
 */
export async function refuseBeyondHorizon(
  db: Queryable,
  world: string,
  commit: number,
  horizon: number,
  field: string,
): Promise<void> {
  if (commit >= horizon) return;
  if ((await keptPoints(db, world)).includes(commit)) return;
  const detail = `commit ${commit} of ${world} is before its retained horizon (${horizon}): its history there was pruned (docs/adr/0072)`;
  throw new HttpProblem(410, 'gone', 'Gone', detail, {
    horizon,
    errors: [{ path: field, message: `must be at least ${horizon} (the retained horizon), or a kept point` }],
  });
}
