-- Keys that lead with world_id (issue 33 item 4, docs/adr/0074): Citus distributes a table by a
-- column that must be part of its primary key and of every unique index. Each key is built as a
-- unique index first and then made the primary key from it: an operator may build that index
-- beforehand with CREATE UNIQUE INDEX CONCURRENTLY under the same name, and the migration then only
-- swaps the constraint (IF NOT EXISTS keeps theirs).

CREATE UNIQUE INDEX IF NOT EXISTS alerts_world_pkey ON alerts (world_id, id);
ALTER TABLE alerts DROP CONSTRAINT alerts_pkey, ADD CONSTRAINT alerts_world_pkey PRIMARY KEY USING INDEX alerts_world_pkey;
-- The key serves the listing newest first as well (ids are UUIDv7).
DROP INDEX alerts_by_world;

CREATE UNIQUE INDEX IF NOT EXISTS decisions_world_pkey ON decisions (world_id, id);
ALTER TABLE decisions DROP CONSTRAINT decisions_pkey,
  ADD CONSTRAINT decisions_world_pkey PRIMARY KEY USING INDEX decisions_world_pkey;
DROP INDEX decisions_by_world;

CREATE UNIQUE INDEX IF NOT EXISTS recompute_jobs_world_pkey ON recompute_jobs (world_id, id);
ALTER TABLE recompute_jobs DROP CONSTRAINT recompute_jobs_pkey,
  ADD CONSTRAINT recompute_jobs_world_pkey PRIMARY KEY USING INDEX recompute_jobs_world_pkey;

-- A value's former versions: each one superseded at a greater data seq than the one before (a row
-- is written only when the value's valid_seq is below the seq superseding it, and the value then
-- takes that seq), so the lookup index is a key.
CREATE UNIQUE INDEX IF NOT EXISTS derived_values_history_pkey
  ON derived_values_history (world_id, object_type, pk, name, superseded_seq);
ALTER TABLE derived_values_history ADD CONSTRAINT derived_values_history_pkey
  PRIMARY KEY USING INDEX derived_values_history_pkey;
DROP INDEX derived_values_history_by_key;

-- A merge's world is its target: the world it writes, and the key of every event about it
-- (control emits world.merge.* with the target's id). The base can be absent (worlds with no shared
-- history), the target never is.
ALTER TABLE definition_merges ADD COLUMN world_id text;
UPDATE definition_merges SET world_id = target;
ALTER TABLE definition_merges ALTER COLUMN world_id SET NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS definition_merges_world_pkey ON definition_merges (world_id, id);
ALTER TABLE definition_merges DROP CONSTRAINT definition_merges_pkey,
  ADD CONSTRAINT definition_merges_world_pkey PRIMARY KEY USING INDEX definition_merges_world_pkey;

-- audit_log (kernel migration 001) is a world table here: a world's entries lead its key with
-- world_id. Entries of no world (an operator's action on the outbox, say) go to audit_log_global,
-- a reference table once sharded; the trigger routes them, so that recordAudit, which control
-- shares, writes one statement everywhere.
CREATE TABLE audit_log_global (
  id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  at         timestamptz NOT NULL DEFAULT now(),
  actor      text        NOT NULL,
  action     text        NOT NULL,
  subject    text,
  request_id text,
  detail     jsonb       NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX audit_log_global_at ON audit_log_global (at);

CREATE FUNCTION audit_log_without_world() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.world_id IS NOT NULL THEN
    RETURN NEW;
  END IF;
  INSERT INTO audit_log_global (at, actor, action, subject, request_id, detail)
  VALUES (NEW.at, NEW.actor, NEW.action, NEW.subject, NEW.request_id, NEW.detail);
  RETURN NULL;
END $$;

-- The trigger first: its lock (SHARE ROW EXCLUSIVE, held to the end) keeps writers out until the
-- entries without a world have moved.
CREATE TRIGGER audit_log_without_world BEFORE INSERT ON audit_log
  FOR EACH ROW EXECUTE FUNCTION audit_log_without_world();
INSERT INTO audit_log_global (at, actor, action, subject, request_id, detail)
SELECT at, actor, action, subject, request_id, detail FROM audit_log WHERE world_id IS NULL ORDER BY id;
DELETE FROM audit_log WHERE world_id IS NULL;
ALTER TABLE audit_log ALTER COLUMN world_id SET NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS audit_log_world_pkey ON audit_log (world_id, id);
ALTER TABLE audit_log DROP CONSTRAINT audit_log_pkey,
  ADD CONSTRAINT audit_log_world_pkey PRIMARY KEY USING INDEX audit_log_world_pkey;
