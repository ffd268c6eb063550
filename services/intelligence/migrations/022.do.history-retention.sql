-- History retention (docs/adr/0072, 0073): data's retained horizon for each world, from
-- storage.history.horizon, and the pruning pass under way. Reads at an older data commit answer
-- 410 unless a kept point (a tag, a child world's fork point) names it; the versioned read-model
-- rows and definition history no kept ref reads are pruned in batches.
CREATE TABLE world_horizons (
  world_id     text        PRIMARY KEY,
  horizon_seq  bigint      NOT NULL,
  horizon_at   timestamptz NOT NULL DEFAULT now(),
  -- The pass under way: the table (0 objects, 1 links, 2 derived values, 3 definitions) and the
  -- superseded_seq up to which it has looked.
  pass_table   smallint,
  pass_after   bigint,
  pruned       bigint      NOT NULL DEFAULT 0
);

-- The pruner walks each history table of a world by the end of its rows' intervals.
CREATE INDEX rm_objects_history_by_superseded ON rm_objects_history (world_id, superseded_seq);
CREATE INDEX rm_links_history_by_superseded ON rm_links_history (world_id, superseded_seq);
CREATE INDEX derived_values_history_by_superseded ON derived_values_history (world_id, superseded_seq);
