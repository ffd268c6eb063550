-- Reads at a ref in intelligence (docs/adr/0069): instants resolved to the commit data resolves
-- them to, from what data's events say, and definitions listed as of a definition position.

-- When data committed each write intelligence applied (its change events' `writtenAt`, data's
-- written_at to the microsecond), per world: an instant reads the greatest commit of the world's
-- chain written at or before it. Writes announced before data sent `writtenAt` have no row.
CREATE TABLE rm_commit_times (
  world_id   text        NOT NULL,
  seq        bigint      NOT NULL,
  written_at timestamptz NOT NULL,
  PRIMARY KEY (world_id, seq)
);

-- A world's first commit in data and when data provisioned it (data's `world.provisioned`
-- `created`): an instant before it is before the world existed, and an instant reads at least it.
CREATE TABLE data_world_starts (
  world_id   text        PRIMARY KEY,
  created_seq bigint     NOT NULL,
  created_at timestamptz NOT NULL
);

-- A world's definitions at a definition position (lists at a ref, docs/adr/0069): per kind and
-- name the newest history row at or below it (deletions have no body), with when the name was
-- first written.
CREATE FUNCTION definitions_at(w text, p bigint)
RETURNS TABLE (kind text, name text, version integer, body jsonb, written_at timestamptz, created timestamptz)
LANGUAGE sql STABLE AS $$
  SELECT a.kind, a.name, a.version, a.body, a.written_at,
         (SELECT min(f.written_at) FROM definition_history f
           WHERE f.world_id = w AND f.kind = a.kind AND f.name = a.name) AS created
    FROM (SELECT DISTINCT ON (h.kind, h.name) h.kind, h.name, h.version, h.body, h.written_at
            FROM definition_history h WHERE h.world_id = w AND h.seq <= p
           ORDER BY h.kind, h.name, h.seq DESC) a
   WHERE a.body IS NOT NULL
$$;

-- Every version a decision had before its current one (decisions at a ref, docs/adr/0069): kept
-- by a trigger on each change (each takes a new intelligence_seq), so no writer can forget it.
-- A decision at moment m is its newest version with seq <= m; none: not made yet.
CREATE TABLE decisions_history (LIKE decisions);
ALTER TABLE decisions_history ADD PRIMARY KEY (world_id, id, seq);

CREATE FUNCTION keep_decision_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO decisions_history SELECT OLD.* ON CONFLICT DO NOTHING;
  RETURN NULL;
END
$$;

CREATE TRIGGER decisions_keep_versions AFTER UPDATE ON decisions
  FOR EACH ROW WHEN (OLD.seq IS DISTINCT FROM NEW.seq) EXECUTE FUNCTION keep_decision_version();
