-- The read model the consumer benchmark upserts into: one row per object, version-checked.
CREATE TABLE items (
  world   text    NOT NULL,
  key     text    NOT NULL,
  version integer NOT NULL,
  value   jsonb   NOT NULL,
  PRIMARY KEY (world, key)
);
