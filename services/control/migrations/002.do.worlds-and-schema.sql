-- Worlds as control knows them; the lifecycle columns are driven by the provisioning saga.
CREATE TABLE worlds (
  id             text        PRIMARY KEY,
  status         text        NOT NULL CHECK (status IN ('PROVISIONING', 'READY', 'FAILED', 'DELETING', 'DELETED')),
  parent_world   text,
  parent_ref     text,
  created_by     text        NOT NULL,
  created_at     timestamptz NOT NULL DEFAULT now(),
  updated_at     timestamptz NOT NULL DEFAULT now(),
  deadline_at    timestamptz,
  confirmed_by   text[]      NOT NULL DEFAULT '{}',
  dropped_by     text[]      NOT NULL DEFAULT '{}',
  failure        text
);
CREATE INDEX worlds_provisioning_deadline ON worlds (deadline_at) WHERE status = 'PROVISIONING';

-- Every version of every world's ontology schema, with the change that made it. The newest
-- row per world is the current schema; versions are dense (1, 2, 3, …) per world.
CREATE TABLE schema_versions (
  world_id   text        NOT NULL REFERENCES worlds (id),
  version    integer     NOT NULL CHECK (version > 0),
  document   jsonb       NOT NULL,
  diff       jsonb       NOT NULL,
  breaking   boolean     NOT NULL,
  author     text        NOT NULL,
  request_id text,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (world_id, version)
);
