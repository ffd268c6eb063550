-- Reads at a data commit (`?at=<n>`, as data's reads take it): the world read at n, then each
-- base at the smaller of its fork point and n. The same as rm_chain, rm_object_at and
-- rm_derived_at (migration 014) with the world's own point given; NULL reads its heads. Those
-- three stay as they are rather than call these: every read of a fork's inherited object goes
-- through them, and their plans are the ones measured (bench/RESULTS.md, intelligence-fork-reads).
CREATE FUNCTION rm_chain_at(w text, c bigint) RETURNS TABLE (world_id text, point bigint, depth integer)
LANGUAGE sql STABLE AS $$
  WITH RECURSIVE ch(world_id, point, depth) AS (
    SELECT w, c, 0
    UNION ALL
    SELECT b.base_world, least(b.base_seq, ch.point), ch.depth + 1
      FROM ch JOIN world_bases b ON b.world_id = ch.world_id
     WHERE ch.depth < 64
  )
  SELECT ch.world_id, ch.point, ch.depth FROM ch
$$;

CREATE FUNCTION rm_object_at(w text, c bigint, t text, p text)
RETURNS TABLE (world_id text, point bigint, version bigint, seq bigint, deleted boolean, properties jsonb)
LANGUAGE sql STABLE AS $$
  SELECT ch.world_id, ch.point, o.version, o.seq, o.deleted, o.properties
    FROM rm_chain_at(w, c) ch
   CROSS JOIN LATERAL (
     (SELECT r.version, r.seq, r.deleted, r.properties FROM rm_objects r
       WHERE r.world_id = ch.world_id AND r.type = t AND r.pk = p AND (ch.point IS NULL OR r.seq <= ch.point))
     UNION ALL
     (SELECT h.version, h.seq, h.deleted, h.properties FROM rm_objects_history h
       WHERE ch.point IS NOT NULL AND h.world_id = ch.world_id AND h.type = t AND h.pk = p
         AND h.seq <= ch.point AND h.superseded_seq > ch.point)
     LIMIT 1
   ) o
   ORDER BY ch.depth
   LIMIT 1
$$;

CREATE FUNCTION rm_derived_at(w text, c bigint, t text, p text)
RETURNS TABLE (world_id text, name text, value jsonb, value_kind text, error jsonb, computed_at timestamptz,
               definition_version integer, source_version bigint, source_seq bigint, sources jsonb)
LANGUAGE sql STABLE AS $$
  SELECT DISTINCT ON (d.name) ch.world_id, d.name, d.value, d.value_kind, d.error, d.computed_at,
         d.definition_version, d.source_version, d.source_seq, d.sources
    FROM rm_chain_at(w, c) ch
   CROSS JOIN LATERAL (
     SELECT v.name, v.value, v.value_kind, v.error, v.computed_at, v.definition_version, v.source_version,
            v.source_seq, v.sources
       FROM derived_values v
      WHERE v.world_id = ch.world_id AND v.object_type = t AND v.pk = p AND (ch.point IS NULL OR v.valid_seq <= ch.point)
     UNION ALL
     SELECT h.name, h.value, h.value_kind, h.error, h.computed_at, h.definition_version, h.source_version,
            h.source_seq, h.sources
       FROM derived_values_history h
      WHERE ch.point IS NOT NULL AND h.world_id = ch.world_id AND h.object_type = t AND h.pk = p
        AND h.superseded_seq > ch.point AND h.valid_seq <= ch.point
   ) d
   ORDER BY d.name, ch.depth
$$;
