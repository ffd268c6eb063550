-- The tags of each world, for `?at=<tag>` (docs/adr/0046): learnt from the events intelligence
-- already consumes, never asked of control. Two consumers fill a row, in either order, for the
-- newest request of the name (a tag made again: a newer request, which replaces the row):
-- intelligence-worlds, answering `world.tag.requested`, sets `definitions` and `moment` — the
-- world's definition position and the last intelligence_seq then, under the world's lock — and
-- intelligence-definitions, applying data's reply `world.tag.positioned`, sets `commit` (the one
-- data cut) and `written` (the world's own newest write at or before it). A tag without its commit
-- is PENDING here. With both, the row is an anchor that fixes what "the world at that commit"
-- means in intelligence for later forks (docs/adr/0045).
CREATE TABLE world_tags (
  world_id    text   NOT NULL,
  name        text   NOT NULL,
  request_id  uuid   NOT NULL,
  commit      bigint,
  written     bigint,
  definitions bigint,
  moment      bigint,
  requested_at timestamptz NOT NULL DEFAULT now(),
  -- Deleted in control (`world.tag.deleted`): no longer resolved, still an anchor.
  deleted      boolean NOT NULL DEFAULT false,
  PRIMARY KEY (world_id, name)
);
CREATE INDEX world_tags_by_commit ON world_tags (world_id, commit);
