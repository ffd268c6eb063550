-- Decision definitions (what to do when a rule raises an alert) and the decisions they made.
CREATE TABLE decision_definitions (
  world_id       text        NOT NULL,
  name           text        NOT NULL,
  rule           text,
  alert_type     text,
  action_type    text        NOT NULL,
  parameters     jsonb       NOT NULL,
  approval       text        NOT NULL CHECK (approval IN ('automatic', 'manual')),
  description    text,
  version        integer     NOT NULL CHECK (version > 0),
  state          text        NOT NULL CHECK (state IN ('valid', 'invalid')),
  errors         jsonb       NOT NULL DEFAULT '[]',
  schema_version integer     NOT NULL,
  created_at     timestamptz NOT NULL DEFAULT now(),
  updated_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (world_id, name),
  CHECK ((rule IS NULL) <> (alert_type IS NULL))
);

CREATE TABLE decisions (
  id                 uuid        PRIMARY KEY,
  world_id           text        NOT NULL,
  definition         text        NOT NULL,
  definition_version integer     NOT NULL,
  alert_id           uuid        NOT NULL,
  rule               text        NOT NULL,
  alert_type         text        NOT NULL,
  object_type        text        NOT NULL,
  pk                 text        NOT NULL,
  action_type        text        NOT NULL,
  parameters         jsonb,
  approval           text        NOT NULL CHECK (approval IN ('automatic', 'manual')),
  status             text        NOT NULL
                     CHECK (status IN ('PENDING_APPROVAL', 'REJECTED', 'EXECUTED', 'FAILED')),
  error              jsonb,
  action_id          text,
  decided_by         text,
  decided_at         timestamptz,
  reason             text,
  -- Bumped by every change of the decision; the version of its events.
  version            integer     NOT NULL,
  -- intelligence_seq of the decision's last event.
  seq                bigint      NOT NULL,
  created_at         timestamptz NOT NULL DEFAULT now(),
  updated_at         timestamptz NOT NULL DEFAULT now(),
  -- One decision per alert and definition, however often the alert is looked at.
  UNIQUE (world_id, definition, alert_id)
);
CREATE INDEX decisions_by_world ON decisions (world_id, id DESC);
