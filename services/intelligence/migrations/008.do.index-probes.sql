-- Indexes every hot lookup probes by its full key whatever the statistics say: a fresh world
-- has none, and the planner, taking `world_id = $1 AND link_type = $2` for a handful of rows,
-- would as soon scan a whole world in an index whose other columns it cannot use (ADR 10).

-- Live links from either end, each index led by the end's key, so that neither is of any use
-- to a lookup from the other end.
DROP INDEX rm_links_by_to;
CREATE INDEX rm_links_by_from ON rm_links (from_pk, world_id, link_type) WHERE NOT deleted;
CREATE INDEX rm_links_by_to ON rm_links (to_pk, world_id, link_type) WHERE NOT deleted;

-- A definition's values are found through the primary key (world, type, pk, name); deleting
-- them all, which is rare, scans the world's values instead.
DROP INDEX derived_values_by_name;

-- A deleted object's open alerts, whatever the rule.
CREATE INDEX alerts_open_by_object ON alerts (pk, world_id, object_type) WHERE status = 'OPEN';
