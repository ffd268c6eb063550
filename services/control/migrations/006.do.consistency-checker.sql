-- The consistency checker (docs/adr/0032). A check asks data and intelligence for a report of each
-- world (check.requested) and compares their answers, which arrive on Kafka.
CREATE TABLE checker_runs (
  check_id    uuid        PRIMARY KEY,
  started_at  timestamptz NOT NULL DEFAULT now(),
  finished_at timestamptz
);

-- The answers: one per (check, world, service), as the service sent it.
CREATE TABLE checker_reports (
  check_id    uuid        NOT NULL,
  world_id    text        NOT NULL,
  service     text        NOT NULL CHECK (service IN ('data', 'intelligence')),
  report      jsonb       NOT NULL,
  received_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (check_id, world_id, service)
);

-- What a check found, and the repair it asked for (null: nothing to repair by itself). world_id
-- is null for what belongs to no world (a service's outbox, a dead-letter topic).
CREATE TABLE checker_findings (
  id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  check_id   uuid        NOT NULL REFERENCES checker_runs (check_id) ON DELETE CASCADE,
  world_id   text,
  kind       text        NOT NULL,
  subject    text        NOT NULL,
  detail     jsonb       NOT NULL,
  repair     text,
  found_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX checker_findings_by_check ON checker_findings (check_id);
