-- An object's current version lives in its head alone; object_history keeps the versions it
-- superseded (docs/adr/0017). A creation writes one row instead of two, and every current
-- version is stored once. Who wrote the current version moves onto the head.
ALTER TABLE object_heads
  ADD COLUMN actor      text,
  ADD COLUMN request_id text;

UPDATE object_heads h
   SET actor = x.actor, request_id = x.request_id
  FROM object_history x
 WHERE x.world_id = h.world_id AND x.type = h.type AND x.pk = h.pk AND x.seq = h.seq;

DELETE FROM object_history x
 USING object_heads h
 WHERE x.world_id = h.world_id AND x.type = h.type AND x.pk = h.pk AND x.seq = h.seq;

UPDATE object_heads SET actor = 'unknown' WHERE actor IS NULL;
ALTER TABLE object_heads ALTER COLUMN actor SET NOT NULL;

-- Every version of every object, superseded and current: the audit trail, and what a read at a
-- commit chooses from (the newest with seq <= c).
CREATE VIEW object_versions AS
  SELECT world_id, type, pk, seq, version, deleted, properties, schema_version, actor, request_id, written_at
    FROM object_history
  UNION ALL
  SELECT world_id, type, pk, seq, version, deleted, properties, schema_version, actor, request_id,
         updated_at AS written_at
    FROM object_heads;
