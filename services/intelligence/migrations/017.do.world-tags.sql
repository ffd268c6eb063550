-- The tags of each world, for `?at=<tag>` (docs/adr/0046): learnt from the events intelligence
-- already consumes, never asked of control. `world.tag.requested` records the name and request
-- (a tag made again under its name: a newer request, which replaces it); data's reply
-- `world.tag.positioned` (caused by the request, so applied after it) fills the commit data cut
-- and `written`, the world's own newest write at or before it. A tag without its commit yet is
-- PENDING here. `definitions` and `moment` are the world's definition position and the last
-- intelligence_seq when the request was applied (under the world's lock): with the commit, an
-- anchor that fixes what "the world at that commit" means in intelligence for later forks
-- (docs/adr/0045).
CREATE TABLE world_tags (
  world_id    text   NOT NULL,
  name        text   NOT NULL,
  request_id  uuid   NOT NULL,
  commit      bigint,
  written     bigint,
  definitions bigint NOT NULL,
  moment      bigint NOT NULL,
  PRIMARY KEY (world_id, name)
);
CREATE INDEX world_tags_by_commit ON world_tags (world_id, commit);
