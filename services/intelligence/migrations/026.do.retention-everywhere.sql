-- History retention, the rest of it (docs/adr/0077): intelligence keeps the points data keeps
-- where it can know them, applies keepVersions, and prunes decision history.

-- The world's keepVersions, from control's world.retention.updated (only a greater revision
-- replaces it): the newest keepVersions versions of every key intelligence versions stay.
CREATE TABLE world_retention (
  world_id      text    PRIMARY KEY,
  keep_versions integer CHECK (keep_versions >= 1),
  revision      integer NOT NULL
);

-- A page token of intelligence's object sets keeps the commit it reads while it lives
-- (QUERY_TOKEN_TTL_SECONDS), as data's page tokens do in data.
CREATE TABLE history_pins (
  world_id   text        NOT NULL,
  commit     bigint      NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (world_id, commit)
);

-- data's merges, as data's replies (merge.planned, merge.applied, merge.compensated) and control's
-- request (world.merge.requested: its source and base) say them, in either order: their base,
-- source, target and merge-commit points are kept while data keeps them (planned or applied).
-- world_id is the merge's target.
CREATE TABLE data_merges (
  world_id   text   NOT NULL,
  merge_id   uuid   NOT NULL,
  source     text,
  base_world text,
  base_seq   bigint,
  source_seq bigint,
  target_seq bigint,
  commit_seq bigint,
  status     text   CHECK (status IN ('planned', 'applied', 'compensated')),
  PRIMARY KEY (world_id, merge_id)
);
CREATE INDEX data_merges_by_source ON data_merges (source);
CREATE INDEX data_merges_by_base ON data_merges (base_world);

-- The pass prunes decisions_history too (pass_table 4), each row its decision's state for
-- intelligence moments [seq, the next version's seq).
COMMENT ON COLUMN world_horizons.pass_table IS
  'the pass under way: 0 objects, 1 links, 2 derived values, 3 definitions, 4 decisions; NULL none';
