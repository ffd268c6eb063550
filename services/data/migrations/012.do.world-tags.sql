-- The tags of each world as data positioned them (docs/adr/0046): `?at=<tag>` reads at the commit
-- data cut for the tag, with no call to control. Written when data answers `world.tag.requested`
-- (the request of a tag made again under the same name replaces the old one: a world's requests
-- arrive in order, on one partition). Dropped with the world.
CREATE TABLE world_tags (
  world_id   text   NOT NULL,
  name       text   NOT NULL,
  request_id uuid   NOT NULL,
  commit     bigint NOT NULL,
  PRIMARY KEY (world_id, name)
);
