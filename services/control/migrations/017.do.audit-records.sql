-- The audit read model (docs/adr/0084): every audit.recorded event of the three services, read
-- from onto.audit by the control-audit consumer, for GET /v1/audit. Newest first by the time the
-- producing service recorded it; the event id orders records of one instant and makes a
-- redelivered event a no-op.
CREATE TABLE audit_records (
  event_id       uuid        PRIMARY KEY,
  recorded_at    timestamptz NOT NULL,
  service        text        NOT NULL,
  world_id       text,
  actor          text        NOT NULL,
  token_id       text,
  action         text        NOT NULL,
  target         text,
  request_id     text        NOT NULL,
  result         text        NOT NULL,
  before_version bigint,
  after_version  bigint,
  detail         jsonb       NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_records_recent ON audit_records (recorded_at DESC, event_id DESC);
CREATE INDEX audit_records_world ON audit_records (world_id, recorded_at DESC, event_id DESC);
CREATE INDEX audit_records_actor ON audit_records (actor, recorded_at DESC, event_id DESC);
CREATE INDEX audit_records_request ON audit_records (request_id);
