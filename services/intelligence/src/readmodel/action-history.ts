import type { Queryable } from '@onto/shared';

/*
 * Retention of actions' versions (docs/adr/0078), under the horizon rule of the rest of
 * intelligence's history (docs/adr/0072, 0073). An action's version v, followed by v', is what a
 * read at (c, m) answers when data_seq(v) <= c and not (data_seq(v') <= c and seq(v') <= m). Reads
 * at a commit c >= H use as moment that of the first anchor (a tag, a child's fork point) at or
 * after c, or now; reads below H only happen at kept points (tags, children's fork points), each
 * with the least moment of an anchor at or after it. So v goes when v' is seen by every read at
 * or above H (data_seq(v') <= H and seq(v') at or below the least anchor moment at or above H) and
 * no kept point sees v (both its positions at or below the point's) without seeing v'. A step's version goes when no action version
 * kept reads it. The current version is never pruned.
 */

/**
 * Prunes up to `limit` action versions of `world` no read at or above `horizon` nor at a kept
 * point (`kept`: the world's tags' commits and its children's fork points) answers, and the step
 * versions no kept action version reads. Answers how many rows went (both tables): fewer than
 * `limit` when nothing is left below the horizon. Runs in the caller's transaction (the pruner's,
 * holding the world's pass).
 */
export async function pruneActionVersions(
  tx: Queryable,
  world: string,
  horizon: number,
  kept: number[],
  limit: number,
): Promise<number> {
  const versions = await tx.query(
    `WITH anchors AS (
       SELECT commit AS p, moment AS m FROM world_tags WHERE world_id = $1 AND commit IS NOT NULL AND moment IS NOT NULL
       UNION ALL
       SELECT b.base_seq, f.moment FROM world_bases b JOIN fork_points f ON f.world_id = b.world_id
        WHERE b.base_world = $1
     ), kept AS (
       SELECT k.p, (SELECT min(a.m) FROM anchors a WHERE a.p >= k.p) AS m
         FROM unnest($3::bigint[]) AS k(p) WHERE k.p < $2
     ), above AS (
       SELECT min(m) AS m FROM anchors WHERE p >= $2
     ), pairs AS (
       SELECT v.action_id, v.revision, v.data_seq, v.seq, n.data_seq AS next_data, n.seq AS next_seq
         FROM action_versions v
         JOIN LATERAL (SELECT x.data_seq, x.seq FROM action_versions x
                        WHERE x.world_id = v.world_id AND x.action_id = v.action_id AND x.revision > v.revision
                        ORDER BY x.revision LIMIT 1) n ON true
        WHERE v.world_id = $1 AND n.data_seq <= $2
     ), doomed AS (
       SELECT p.action_id, p.revision FROM pairs p, above h
        WHERE (h.m IS NULL OR p.next_seq <= h.m)
          AND NOT EXISTS (SELECT 1 FROM kept k
                           WHERE p.data_seq <= k.p AND (k.m IS NULL OR p.seq <= k.m)
                             AND (k.p < p.next_data OR (k.m IS NOT NULL AND k.m < p.next_seq)))
        LIMIT $4
     )
     DELETE FROM action_versions d USING doomed
      WHERE d.world_id = $1 AND d.action_id = doomed.action_id AND d.revision = doomed.revision`,
    [world, horizon, kept, limit],
  );
  const steps = await tx.query(
    `WITH doomed AS (
       SELECT s.action_id, s.n, s.revision FROM action_step_versions s
        WHERE s.world_id = $1
          AND EXISTS (SELECT 1 FROM action_step_versions l
                       WHERE l.world_id = s.world_id AND l.action_id = s.action_id AND l.n = s.n
                         AND l.revision > s.revision
                         AND NOT EXISTS (SELECT 1 FROM action_versions v
                                          WHERE v.world_id = s.world_id AND v.action_id = s.action_id
                                            AND v.revision >= s.revision AND v.revision < l.revision))
        LIMIT $2
     )
     DELETE FROM action_step_versions d USING doomed
      WHERE d.world_id = $1 AND d.action_id = doomed.action_id AND d.n = doomed.n AND d.revision = doomed.revision`,
    [world, limit],
  );
  return (versions.rowCount ?? 0) + (steps.rowCount ?? 0);
}

/** The world's superseded action and step versions (for `onto_history_rows`), as an SQL sum term over $1. */
export const ACTION_HISTORY_ROWS = `(SELECT count(*) FROM action_versions WHERE world_id = $1)
            - (SELECT count(*) FROM actions WHERE world_id = $1)
            + (SELECT count(*) FROM action_step_versions WHERE world_id = $1)
            - (SELECT count(*) FROM action_steps WHERE world_id = $1)`;
