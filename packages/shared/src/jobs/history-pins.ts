import type { Queryable } from '../outbox/outbox.js';

/**
 * A page token of `world` read at `commit` keeps that commit from being pruned until it expires
 * (docs/adr/0072, 0077): data and intelligence each pin their own tokens in their `history_pins`.
 */
export async function pinCommit(db: Queryable, world: string, commit: number, ttlMs: number): Promise<void> {
  await db.query(
    `INSERT INTO history_pins AS p (world_id, commit, expires_at)
     VALUES ($1, $2, now() + make_interval(secs => $3::float8 / 1000))
     ON CONFLICT (world_id, commit) DO UPDATE SET expires_at = greatest(p.expires_at, EXCLUDED.expires_at)`,
    [world, commit, ttlMs],
  );
}
