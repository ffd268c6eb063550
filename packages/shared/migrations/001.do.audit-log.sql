-- Every write a service accepts is recorded here in the write's own transaction: who, what,
-- when and under which request. Kept in each service's own database.
CREATE TABLE audit_log (
  id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  at          timestamptz NOT NULL DEFAULT now(),
  actor       text        NOT NULL,
  action      text        NOT NULL,
  world_id    text,
  subject     text,
  request_id  text,
  detail      jsonb       NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX audit_log_world_at ON audit_log (world_id, at);
