-- The version vector over time (issue 22: the consistency board's last hour, kept by control, not
-- by whoever has the page open): each position world_positions learns is also kept in a
-- 10-second bucket, the newest value of the bucket winning. Positions only rise and are step
-- functions, so the vector at any instant is each service's newest sample at or before it.
-- Trimmed past CONSISTENCY_HISTORY_KEEP_SECONDS by control's consistency plugin.
CREATE TABLE world_position_samples (
  world_id       text        NOT NULL,
  service        text        NOT NULL CHECK (service IN ('data', 'intelligence')),
  at             timestamptz NOT NULL,
  schema_version integer     NOT NULL,
  data_seq       bigint      NOT NULL,
  PRIMARY KEY (world_id, service, at)
);
CREATE INDEX world_position_samples_at ON world_position_samples (at);
