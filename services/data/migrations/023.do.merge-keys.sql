-- Keys that lead with world_id (issue 33 item 4, docs/adr/0074): Citus distributes a table by a
-- column that must be part of its primary key and of every unique index. Each key is built as a
-- unique index first and then made the primary key from it: an operator may build that index
-- beforehand with CREATE UNIQUE INDEX CONCURRENTLY under the same name, and the migration then only
-- swaps the constraint (IF NOT EXISTS keeps theirs).

-- A merge's world is its target: the world it writes, and the key of every event about it
-- (control emits world.merge.* with the target's id). Not the base, which is absent when the two
-- worlds share no history. Its items and conflicts carry it too, filled from the merge.
ALTER TABLE merges ADD COLUMN world_id text;
ALTER TABLE merge_items ADD COLUMN world_id text;
ALTER TABLE merge_conflicts ADD COLUMN world_id text;
UPDATE merges SET world_id = target;
UPDATE merge_items i SET world_id = m.target FROM merges m WHERE m.id = i.merge_id;
UPDATE merge_conflicts c SET world_id = m.target FROM merges m WHERE m.id = c.merge_id;
ALTER TABLE merges ALTER COLUMN world_id SET NOT NULL;
ALTER TABLE merge_items ALTER COLUMN world_id SET NOT NULL;
ALTER TABLE merge_conflicts ALTER COLUMN world_id SET NOT NULL;

-- The children's foreign keys go before the key they reference, then come back on the new one.
ALTER TABLE merge_items DROP CONSTRAINT merge_items_merge_id_fkey;
ALTER TABLE merge_conflicts DROP CONSTRAINT merge_conflicts_merge_id_fkey;
CREATE UNIQUE INDEX IF NOT EXISTS merges_world_pkey ON merges (world_id, id);
ALTER TABLE merges DROP CONSTRAINT merges_pkey, ADD CONSTRAINT merges_world_pkey PRIMARY KEY USING INDEX merges_world_pkey;
CREATE UNIQUE INDEX IF NOT EXISTS merge_items_world_pkey ON merge_items (world_id, merge_id, n);
ALTER TABLE merge_items DROP CONSTRAINT merge_items_pkey,
  ADD CONSTRAINT merge_items_world_pkey PRIMARY KEY USING INDEX merge_items_world_pkey;
CREATE UNIQUE INDEX IF NOT EXISTS merge_conflicts_world_pkey ON merge_conflicts (world_id, merge_id, id);
ALTER TABLE merge_conflicts DROP CONSTRAINT merge_conflicts_pkey,
  ADD CONSTRAINT merge_conflicts_world_pkey PRIMARY KEY USING INDEX merge_conflicts_world_pkey;
ALTER TABLE merge_items ADD CONSTRAINT merge_items_merge_fkey FOREIGN KEY (world_id, merge_id)
  REFERENCES merges (world_id, id) ON DELETE CASCADE NOT VALID;
ALTER TABLE merge_items VALIDATE CONSTRAINT merge_items_merge_fkey;
ALTER TABLE merge_conflicts ADD CONSTRAINT merge_conflicts_merge_fkey FOREIGN KEY (world_id, merge_id)
  REFERENCES merges (world_id, id) ON DELETE CASCADE NOT VALID;
ALTER TABLE merge_conflicts VALIDATE CONSTRAINT merge_conflicts_merge_fkey;
