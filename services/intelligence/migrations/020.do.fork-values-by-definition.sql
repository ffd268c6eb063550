-- A fork's inherited derived values are those its own definitions computed (docs/adr/0068):
-- a base that changes or deletes a derived property with no data write in between must not
-- change what its forks answer. derived_values_history is on data's scale only ([valid_seq,
-- superseded_seq)); a value replaced by another definition (a change, or a deletion) is now kept
-- there too, valid until the next data change of what it read (the application writes it:
-- engine/evaluation.ts, derived/repository.ts), and a read through the chain takes, for a base,
-- only values computed by the definition the reading world has now (the same body).

-- The body of the definition of `n` in world `w` at version `v` that computed a value at `at`:
-- of the incarnations of that version (a name deleted and made again starts at 1 again), the
-- newest written by then.
CREATE FUNCTION rm_derived_body(w text, n text, v integer, at timestamptz) RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT h.body FROM definition_history h
   WHERE h.world_id = w AND h.kind = 'derived' AND h.name = n AND h.version = v AND h.body IS NOT NULL
   ORDER BY h.written_at <= at DESC, h.seq DESC
   LIMIT 1
$$;

-- The body of world w's derived property n now (as definition_history spells it), NULL: none.
CREATE FUNCTION rm_derived_own_body(w text, n text) RETURNS jsonb
LANGUAGE sql STABLE AS $$
  SELECT jsonb_strip_nulls(jsonb_build_object('objectType', f.object_type, 'expression', f.expression,
           'aggregates', f.aggregates, 'maxStalenessMs', f.max_staleness_ms, 'description', f.description))
    FROM derived_definitions f WHERE f.world_id = w AND f.name = n
$$;

-- As migration 014's: per name the nearest world with a value by its point; a base's value only
-- if computed by the reading world's definition; within a world the newest by data, then time.
CREATE OR REPLACE FUNCTION rm_derived_at(w text, t text, p text)
RETURNS TABLE (world_id text, name text, value jsonb, value_kind text, error jsonb, computed_at timestamptz,
               definition_version integer, source_version bigint, source_seq bigint, sources jsonb)
LANGUAGE sql STABLE AS $$
  SELECT DISTINCT ON (d.name) c.world_id, d.name, d.value, d.value_kind, d.error, d.computed_at,
         d.definition_version, d.source_version, d.source_seq, d.sources
    FROM rm_chain(w) c
   CROSS JOIN LATERAL (
     SELECT v.name, v.value, v.value_kind, v.error, v.computed_at, v.definition_version, v.source_version,
            v.source_seq, v.sources, v.valid_seq
       FROM derived_values v
      WHERE v.world_id = c.world_id AND v.object_type = t AND v.pk = p AND (c.point IS NULL OR v.valid_seq <= c.point)
     UNION ALL
     SELECT h.name, h.value, h.value_kind, h.error, h.computed_at, h.definition_version, h.source_version,
            h.source_seq, h.sources, h.valid_seq
       FROM derived_values_history h
      WHERE c.point IS NOT NULL AND h.world_id = c.world_id AND h.object_type = t AND h.pk = p
        AND h.superseded_seq > c.point AND h.valid_seq <= c.point
   ) d
   WHERE c.depth = 0
      OR rm_derived_body(c.world_id, d.name, d.definition_version, d.computed_at) = rm_derived_own_body(w, d.name)
   ORDER BY d.name, c.depth, d.valid_seq DESC, d.computed_at DESC
$$;

-- As migration 015's, at a data commit.
CREATE OR REPLACE FUNCTION rm_derived_at(w text, c bigint, t text, p text)
RETURNS TABLE (world_id text, name text, value jsonb, value_kind text, error jsonb, computed_at timestamptz,
               definition_version integer, source_version bigint, source_seq bigint, sources jsonb)
LANGUAGE sql STABLE AS $$
  SELECT DISTINCT ON (d.name) ch.world_id, d.name, d.value, d.value_kind, d.error, d.computed_at,
         d.definition_version, d.source_version, d.source_seq, d.sources
    FROM rm_chain_at(w, c) ch
   CROSS JOIN LATERAL (
     SELECT v.name, v.value, v.value_kind, v.error, v.computed_at, v.definition_version, v.source_version,
            v.source_seq, v.sources, v.valid_seq
       FROM derived_values v
      WHERE v.world_id = ch.world_id AND v.object_type = t AND v.pk = p AND (ch.point IS NULL OR v.valid_seq <= ch.point)
     UNION ALL
     SELECT h.name, h.value, h.value_kind, h.error, h.computed_at, h.definition_version, h.source_version,
            h.source_seq, h.sources, h.valid_seq
       FROM derived_values_history h
      WHERE ch.point IS NOT NULL AND h.world_id = ch.world_id AND h.object_type = t AND h.pk = p
        AND h.superseded_seq > ch.point AND h.valid_seq <= ch.point
   ) d
   WHERE ch.depth = 0
      OR rm_derived_body(ch.world_id, d.name, d.definition_version, d.computed_at) = rm_derived_own_body(w, d.name)
   ORDER BY d.name, ch.depth, d.valid_seq DESC, d.computed_at DESC
$$;
