-- Worlds as branches (issue 16): parent_ref is now the raw ref of the fork (a data commit, an
-- instant or a tag, NULL = now), the schema version copied has its own column, data reports the
-- commit it forked at, and a failure names the field that caused it when a service said which.
ALTER TABLE worlds
  ADD COLUMN parent_schema_version integer,
  ADD COLUMN parent_commit         bigint,
  ADD COLUMN failure_field         text;
-- Forks made before this held the schema version in parent_ref, and no data ref.
UPDATE worlds SET parent_schema_version = parent_ref::integer, parent_ref = NULL
 WHERE parent_world IS NOT NULL AND parent_ref ~ '^[0-9]+$';
-- Deleting a world looks up the worlds that fork from it.
CREATE INDEX worlds_parent_world ON worlds (parent_world) WHERE parent_world IS NOT NULL;
