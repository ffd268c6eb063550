-- Worlds as branches (docs/adr/0023): a fork is one row (base_world, base_seq), no object copied;
-- reads at a commit choose, per key, the newest version with seq <= c up the chain of bases.

-- created_seq: data_seq when the world came to be here (its fork point for a fork): commits of a
-- world start there. Worlds provisioned before this migration existed from the beginning.
ALTER TABLE worlds ADD COLUMN created_seq bigint NOT NULL DEFAULT 0;

-- The write that superseded a history row: a history row is the key's state for
-- seq <= c < superseded_seq, so "every object of a world at c" is heads with seq <= c plus the
-- history rows whose interval holds c, without a per-key search.
ALTER TABLE object_history ADD COLUMN superseded_seq bigint;
UPDATE object_history x
   SET superseded_seq = coalesce(
     (SELECT min(y.seq) FROM object_history y
       WHERE y.world_id = x.world_id AND y.type = x.type AND y.pk = x.pk AND y.seq > x.seq),
     (SELECT h.seq FROM object_heads h WHERE h.world_id = x.world_id AND h.type = x.type AND h.pk = x.pk));
ALTER TABLE object_history ALTER COLUMN superseded_seq SET NOT NULL;

-- "What changed in world w between s1 and s2" (diffs, merges): a range of seq per world.
CREATE INDEX object_heads_by_seq ON object_heads (world_id, seq);
CREATE INDEX object_history_by_seq ON object_history (world_id, seq);
CREATE INDEX link_history_by_seq ON link_history (world_id, seq);
-- A link traversal at a commit from the `to` side (the primary key serves the `from` side).
CREATE INDEX link_history_to ON link_history (world_id, link_type, to_pk, from_pk, seq);

-- The chain world w reads at commit c (NULL: its current heads): w itself, then each base at its
-- fork point.
CREATE FUNCTION world_chain(w text, c bigint)
RETURNS TABLE (depth integer, world_id text, up_to bigint)
LANGUAGE sql STABLE AS $$
  WITH RECURSIVE chain (depth, world_id, up_to, base_world, base_seq) AS (
    SELECT 0, id, c, base_world, base_seq FROM worlds WHERE id = w
    UNION ALL
    SELECT ch.depth + 1, x.id, least(ch.base_seq, ch.up_to), x.base_world, x.base_seq
      FROM chain ch JOIN worlds x ON x.id = ch.base_world
     WHERE ch.depth < 256
  )
  SELECT depth, world_id, up_to FROM chain
$$;

-- One object of world w at commit c (NULL: current), read up the chain: the first world of the
-- chain that wrote the key at or before its point decides (a tombstone there means absent).
CREATE FUNCTION object_at(w text, c bigint, t text, k text)
RETURNS TABLE (version bigint, seq bigint, deleted boolean, properties jsonb, written_at timestamptz, depth integer)
LANGUAGE sql STABLE AS $$
  SELECT v.version, v.seq, v.deleted, v.properties, v.written_at, ch.depth
    FROM world_chain(w, c) ch
    CROSS JOIN LATERAL (
      SELECT * FROM (
        SELECT h.version, h.seq, h.deleted, h.properties, h.updated_at AS written_at FROM object_heads h
         WHERE h.world_id = ch.world_id AND h.type = t AND h.pk = k AND (ch.up_to IS NULL OR h.seq <= ch.up_to)
        UNION ALL
        (SELECT x.version, x.seq, x.deleted, x.properties, x.written_at FROM object_history x
          WHERE x.world_id = ch.world_id AND x.type = t AND x.pk = k AND x.seq <= ch.up_to
          ORDER BY x.seq DESC LIMIT 1)
      ) one ORDER BY one.seq DESC LIMIT 1
    ) v
   ORDER BY ch.depth LIMIT 1
$$;

-- One link of world w at commit c (NULL: current), read up the chain as object_at does.
-- link_history holds every version of a link, the current one included (docs/adr/0017).
CREATE FUNCTION link_at(w text, c bigint, lt text, f text, tt text)
RETURNS TABLE (version bigint, seq bigint, deleted boolean, depth integer)
LANGUAGE sql STABLE AS $$
  SELECT v.version, v.seq, v.deleted, ch.depth
    FROM world_chain(w, c) ch
    CROSS JOIN LATERAL (
      SELECT x.version, x.seq, x.deleted FROM link_history x
       WHERE x.world_id = ch.world_id AND x.link_type = lt AND x.from_pk = f AND x.to_pk = tt
         AND (ch.up_to IS NULL OR x.seq <= ch.up_to)
       ORDER BY x.seq DESC LIMIT 1
    ) v
   ORDER BY ch.depth LIMIT 1
$$;

-- The indexes of indexed properties get a twin on history (lists at a commit filter superseded
-- versions too): the builder makes both, so the ones already built are asked for again.
UPDATE storage_indexes SET state = 'pending', attempts = 0 WHERE state = 'ready';
