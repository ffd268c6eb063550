-- Events the broker refused for good (record too large, invalid record, topic not authorised):
-- the relay moves each here with the broker's reason and marks its row sent, so that its lane
-- goes on instead of retrying it forever. Each holds what the relay would publish (a bundle's
-- event expanded), so it outlives the outbox row's retention and can be redriven once the cause
-- is fixed (a topic's limit raised, an ACL granted).
CREATE TABLE outbox_set_aside (
  id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  outbox_id     bigint      NOT NULL,
  event_id      uuid        NOT NULL,
  topic         text        NOT NULL,
  partition_key text        NOT NULL,
  body          text        NOT NULL,
  headers       jsonb       NOT NULL DEFAULT '{}'::jsonb,
  reason        text        NOT NULL,
  set_aside_at  timestamptz NOT NULL DEFAULT now(),
  redriven_at   timestamptz
);
CREATE INDEX outbox_set_aside_waiting ON outbox_set_aside (id) WHERE redriven_at IS NULL;
