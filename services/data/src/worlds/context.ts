import type { Queryable } from '@onto/shared';
import { protectionColumns, protectionOf, type WorldProtection } from './protection.js';

/** A world as every write and read of it sees it: provisioned here, forked, its schema version, its protection. */
export interface WorldContext {
  /** The world is provisioned here (data's `worlds`). */
  provisioned: boolean;
  /** The world is a fork (it reads through a base; docs/adr/0023). */
  forked?: boolean;
  /** The world's applied schema version (0 before the first). */
  schemaVersion: number;
  /** The world's protection (docs/adr/0058). */
  protection?: WorldProtection;
}

/** The world and its schema version, for routes about no single object. */
export async function worldContext(db: Queryable, worldId: string): Promise<WorldContext> {
  const { rows } = await db.query<{
    provisioned: boolean;
    forked: boolean;
    schema_version: number;
    require_merge: boolean;
    allow_actions: boolean;
  }>(
    `SELECT w.id IS NOT NULL AS provisioned, w.base_world IS NOT NULL AS forked,
            (SELECT coalesce(max(version), 0) FROM schema_versions WHERE world_id = $1) AS schema_version,
            ${protectionColumns('w')}
       FROM (SELECT 1) one LEFT JOIN worlds w ON w.id = $1`,
    [worldId],
  );
  return {
    provisioned: rows[0]?.provisioned ?? false,
    forked: rows[0]?.forked ?? false,
    schemaVersion: rows[0]?.schema_version ?? 0,
    protection: protectionOf(rows[0]),
  };
}
