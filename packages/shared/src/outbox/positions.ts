import type { Queryable } from '../db/queryable.js';

/*
 * What the outbox tells of positions without a service parsing its rows: the storage format
 * (plain bodies and bundles, bundle.ts) is the kernel's own.
 */

/**
 * The newest write sequence per world among the change events of outbox rows (from, to], read
 * without rebuilding or parsing a body: the world is the first segment of the partition key; the
 * seq is the envelope's `producer_seq` — in a plain body its last occurrence (canonical JSON puts
 * it after the payload, before scalars only), in a bundle the template value that follows the last
 * part ending with it (migrations/008). Rebuilding bundles' bodies cost seconds per
 * 10,000 events; so did a template's field index computed again per line, hence MATERIALIZED.
 */
const POSITIONS_SINCE = `
  WITH fresh AS (
    SELECT partition_key, body, bundle FROM outbox WHERE id > $1 AND id <= $2 AND topic = ANY($3)
  ), templates AS MATERIALIZED (
    SELECT substr(f.body, strpos(f.body, E'\\n') + 1) AS lines,
           (SELECT max(p.i) FROM jsonb_array_elements_text(split_part(f.body, E'\\n', 1)::jsonb) WITH ORDINALITY AS p(part, i)
             WHERE p.part LIKE '%"producer_seq":') AS field
      FROM fresh f WHERE f.bundle IS NOT NULL
  ), seqs AS (
    SELECT split_part(partition_key, '/', 1) AS world,
           substring(body FROM '^.*"producer_seq":([0-9]+)')::int8 AS seq
      FROM fresh WHERE bundle IS NULL
    UNION ALL
    SELECT split_part(split_part(e.line, E'\\t', 2), '/', 1), split_part(e.line, E'\\t', t.field::int + 2)::int8
      FROM templates t CROSS JOIN LATERAL string_to_table(t.lines, E'\\n') AS e(line)
  )
  SELECT world, max(seq)::text AS seq FROM seqs WHERE seq IS NOT NULL GROUP BY world`;

/**
 * The highest `producer_seq` per world among the events of `topics` (physical names) in outbox
 * rows with id in (fromId, toId]: each world's highest position written to the outbox there.
 */
export async function outboxPositions(
  db: Queryable,
  fromId: number,
  toId: number,
  topics: string[],
): Promise<Map<string, number>> {
  const { rows } = await db.query<{ world: string; seq: string }>(POSITIONS_SINCE, [fromId, toId, topics]);
  return new Map(rows.map((r) => [r.world, Number(r.seq)]));
}
