-- Keys that lead with world_id (issue 33 item 4, docs/adr/0074): Citus distributes a table by a
-- column that must be part of its primary key and of every unique index. Each key is built as a
-- unique index first and then made the primary key from it: an operator may build that index
-- beforehand with CREATE UNIQUE INDEX CONCURRENTLY under the same name, and the migration then only
-- swaps the constraint (IF NOT EXISTS keeps theirs).

-- Time series: a series' key (series_keys) leads with its world, and its points and their former
-- values carry the world of their series, so that a world's points live on its shard. The points
-- are partitioned by day: the column and the key are added to every partition (a partitioned
-- table's primary key cannot be taken from an index built beforehand, so series_points is built
-- here, under an ACCESS EXCLUSIVE lock on each partition: docs/adr/0074).
CREATE UNIQUE INDEX IF NOT EXISTS series_keys_world_pkey ON series_keys (world_id, id);
ALTER TABLE series_keys DROP CONSTRAINT series_keys_pkey,
  ADD CONSTRAINT series_keys_world_pkey PRIMARY KEY USING INDEX series_keys_world_pkey;

ALTER TABLE series_points ADD COLUMN world_id text;
-- The backfill is no overwrite: the trigger that keeps former values stays out of it.
ALTER TABLE series_points DISABLE TRIGGER series_point_superseded;
UPDATE series_points p SET world_id = k.world_id FROM series_keys k WHERE k.id = p.series_id;
ALTER TABLE series_points ENABLE TRIGGER series_point_superseded;
-- A point whose series is gone (none should be: a world's drop removes both) has no world to go to.
DELETE FROM series_points WHERE world_id IS NULL;
ALTER TABLE series_points ALTER COLUMN world_id SET NOT NULL;
ALTER TABLE series_points DROP CONSTRAINT series_points_pkey,
  ADD CONSTRAINT series_points_pkey PRIMARY KEY (world_id, series_id, time);

ALTER TABLE series_point_history ADD COLUMN world_id text;
UPDATE series_point_history h SET world_id = k.world_id FROM series_keys k WHERE k.id = h.series_id;
DELETE FROM series_point_history WHERE world_id IS NULL;
ALTER TABLE series_point_history ALTER COLUMN world_id SET NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS series_point_history_world_pkey
  ON series_point_history (world_id, series_id, time, seq);
ALTER TABLE series_point_history DROP CONSTRAINT series_point_history_pkey,
  ADD CONSTRAINT series_point_history_world_pkey PRIMARY KEY USING INDEX series_point_history_world_pkey;

-- An overwritten point's former value keeps its world.
CREATE OR REPLACE FUNCTION series_point_superseded() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO series_point_history (world_id, series_id, time, seq, superseded_seq, num, label)
  VALUES (OLD.world_id, OLD.series_id, OLD.time, OLD.seq, NEW.seq, OLD.num, OLD.label)
  ON CONFLICT DO NOTHING;
  RETURN NEW;
END $$;
