-- Keys that lead with world_id (issue 33 item 4, docs/adr/0074): Citus distributes a table by a
-- column that must be part of its primary key and of every unique index. Each key is built as a
-- unique index first and then made the primary key from it: an operator may build that index
-- beforehand with CREATE UNIQUE INDEX CONCURRENTLY under the same name, and the migration then only
-- swaps the constraint (IF NOT EXISTS keeps theirs).

-- cdc_positions: the same columns, world first.
CREATE UNIQUE INDEX IF NOT EXISTS cdc_positions_world_pkey ON cdc_positions (world_id, source, type, pk);
ALTER TABLE cdc_positions DROP CONSTRAINT cdc_positions_pkey,
  ADD CONSTRAINT cdc_positions_world_pkey PRIMARY KEY USING INDEX cdc_positions_world_pkey;

-- A webhook's deliveries and attempts: (world_id, id), and an attempt names its delivery with its
-- world (the foreign key follows the key it references).
ALTER TABLE webhook_attempts DROP CONSTRAINT webhook_attempts_delivery_id_fkey;
CREATE UNIQUE INDEX IF NOT EXISTS webhook_deliveries_world_pkey ON webhook_deliveries (world_id, id);
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_pkey,
  ADD CONSTRAINT webhook_deliveries_world_pkey PRIMARY KEY USING INDEX webhook_deliveries_world_pkey;
CREATE UNIQUE INDEX IF NOT EXISTS webhook_attempts_world_pkey ON webhook_attempts (world_id, id);
ALTER TABLE webhook_attempts DROP CONSTRAINT webhook_attempts_pkey,
  ADD CONSTRAINT webhook_attempts_world_pkey PRIMARY KEY USING INDEX webhook_attempts_world_pkey;
DROP INDEX webhook_attempts_delivery;
CREATE INDEX webhook_attempts_delivery ON webhook_attempts (world_id, delivery_id);
ALTER TABLE webhook_attempts ADD CONSTRAINT webhook_attempts_delivery_fkey FOREIGN KEY (world_id, delivery_id)
  REFERENCES webhook_deliveries (world_id, id) ON DELETE CASCADE NOT VALID;
ALTER TABLE webhook_attempts VALIDATE CONSTRAINT webhook_attempts_delivery_fkey;

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
