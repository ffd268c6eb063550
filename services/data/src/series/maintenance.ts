/**
 * The partitions of series_points over time (docs/adr/0028): day partitions are created ahead,
 * and a day whose every point is past the retention of every series is dropped whole.
 */
import { isSeriesType, type Queryable, retentionMs, type SchemaDocument } from '@onto/shared';
import type pg from 'pg';
import { forgetPartitions } from './repository.js';

const DAY_MS = 86_400_000;
/** Days of partitions kept ready ahead of now. */
export const DAYS_AHEAD = 7;

/**
 * The longest retention among the series of every world's applied schema: points older than
 * that are past every series' retention. Undefined (keep everything) when a series keeps its
 * points forever, or when no series is declared at all.
 */
export async function longestRetentionMs(db: Queryable): Promise<number | undefined> {
  const { rows } = await db.query<{ document: SchemaDocument }>(
    'SELECT DISTINCT ON (world_id) document FROM schema_versions ORDER BY world_id, version DESC',
  );
  let longest: number | undefined;
  for (const { document } of rows) {
    for (const type of Object.values(document.objectTypes)) {
      for (const def of Object.values(type.properties)) {
        if (!isSeriesType(def.type)) continue;
        const ms = def.retention === undefined ? undefined : retentionMs(def.retention);
        if (ms === undefined) return undefined;
        longest = Math.max(longest ?? 0, ms);
      }
    }
  }
  return longest;
}

/** One pass: partitions for the days ahead, then the drop of days past retention. Answers the dropped. */
export async function maintainPartitions(pool: pg.Pool, now = new Date()): Promise<string[]> {
  const today = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate());
  const days = Array.from({ length: DAYS_AHEAD + 1 }, (_, i) =>
    new Date(today + i * DAY_MS).toISOString().slice(0, 10),
  );
  await pool.query('SELECT series_partition_ensure(d) FROM unnest($1::date[]) AS d', [days]);
  const retention = await longestRetentionMs(pool);
  if (retention === undefined) return [];
  const horizon = new Date(now.getTime() - retention).toISOString();
  const { rows } = await pool.query<{ name: string }>('SELECT series_partitions_drop_before($1) AS name', [horizon]);
  // Former values of points past every retention go with them (history is not partitioned: overwrites are rare).
  await pool.query(
    "DELETE FROM series_point_history WHERE time < date_bin('1 day', $1::timestamptz, timestamptz 'epoch')",
    [horizon],
  );
  if (rows.length > 0) forgetPartitions();
  return rows.map((r) => r.name);
}
