-- The version vector (docs/adr/0024): what data and intelligence last announced they have applied
-- of each world, from their events on Kafka (storage.schema.updated, storage.position,
-- intelligence.position). Each column only ever rises: a replayed or older event never lowers it.
CREATE TABLE world_positions (
  world_id       text        NOT NULL,
  service        text        NOT NULL CHECK (service IN ('data', 'intelligence')),
  -- control's schema version the service has applied (0 before the first).
  schema_version integer     NOT NULL DEFAULT 0,
  -- data's write sequence: data's newest write of the world, intelligence's watermark (0 before the first).
  data_seq       bigint      NOT NULL DEFAULT 0,
  reported_at    timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (world_id, service)
);
