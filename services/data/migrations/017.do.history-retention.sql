-- History retention (docs/adr/0072). A world's policy as control set it (world.retention.updated,
-- ordered by revision), and how far data has pruned: `horizon_seq` is the oldest commit every read
-- at or after which is still exact. Reads at an older commit answer 410 unless a kept point
-- (a tag, a child world's fork point, a merge's point, a live page token) names it.
CREATE TABLE world_retention (
  world_id      text        PRIMARY KEY,
  keep_days     integer,
  keep_versions integer,
  revision      integer     NOT NULL,
  horizon_seq   bigint      NOT NULL DEFAULT 0,
  horizon_at    timestamptz,
  -- The pass under way: the table it prunes (0 objects, 1 links, 2 series points) and the last
  -- seq it looked at, so that each batch continues where the previous one ended.
  pass_table    smallint,
  pass_after    bigint,
  pass_horizon  bigint,
  pruned        bigint      NOT NULL DEFAULT 0,
  updated_at    timestamptz NOT NULL DEFAULT now()
);

-- A page token of an object-set query reads one commit until it expires: the commit is kept
-- until then (upserted when a token is issued, forgotten by the pruner once expired).
CREATE TABLE history_pins (
  world_id   text        NOT NULL,
  commit     bigint      NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (world_id, commit)
);

-- Former point values by the commit that wrote them, for the pruner's batches.
CREATE INDEX series_point_history_by_seq ON series_point_history (seq);
