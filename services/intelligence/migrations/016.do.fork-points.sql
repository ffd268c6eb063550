-- A fork starts from its base as the base was at the fork point, in intelligence too
-- (docs/adr/0045): its definitions are the base's at that point (from the history, deletions
-- included) and its inherited alerts are the base's that were open then.

-- The world's data watermark when the definition changed (0 for rows older than this
-- migration: they count as there from the world's start). Definition writes and watermark
-- advances both hold the world's evaluation lock, so within a world data_seq never decreases as
-- seq grows: "the changes made while the watermark was at most c" is a prefix of the history.
ALTER TABLE definition_history ADD COLUMN data_seq bigint NOT NULL DEFAULT 0;

-- Where a fork starts in intelligence, fixed in the transaction that copies the definitions,
-- under the base's lock: the base's definition position copied, and `moment`, the last value of
-- intelligence_seq then. Every alert the base raised or cleared before has raised_seq/cleared_seq
-- <= moment, every later one a greater one (alerts change under the world's lock too). Forks older
-- than this migration have no row: their alerts are read by the data commit alone, as before.
CREATE TABLE fork_points (
  world_id    text   PRIMARY KEY,
  base_world  text   NOT NULL,
  definitions bigint NOT NULL CHECK (definitions >= 0),
  moment      bigint NOT NULL CHECK (moment >= 0)
);

-- The world, then each base at its data point and its moment (the smallest of each on the way),
-- nearest first; NULL point: the world's own heads; NULL moment: no bound (a fork older than
-- this migration, or the world itself).
CREATE FUNCTION rm_fork_chain(w text)
RETURNS TABLE (world_id text, point bigint, moment bigint, depth integer)
LANGUAGE sql STABLE AS $$
  WITH RECURSIVE c(world_id, point, moment, depth) AS (
    SELECT w, NULL::bigint, NULL::bigint, 0
    UNION ALL
    SELECT b.base_world, least(b.base_seq, c.point), least(f.moment, c.moment), c.depth + 1
      FROM c JOIN world_bases b ON b.world_id = c.world_id
      LEFT JOIN fork_points f ON f.world_id = c.world_id
     WHERE c.depth < 64
  )
  SELECT c.world_id, c.point, c.moment, c.depth FROM c
$$;
