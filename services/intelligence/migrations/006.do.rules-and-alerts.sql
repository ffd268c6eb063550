-- Rules and the alerts they raise (docs/adr/0010).

-- intelligence's own event sequence: the producer_seq of the alert and decision events it emits.
CREATE SEQUENCE IF NOT EXISTS intelligence_seq AS bigint;
CREATE TABLE rules (
  world_id       text        NOT NULL,
  name           text        NOT NULL,
  object_type    text        NOT NULL,
  condition      text        NOT NULL,
  alert_type     text        NOT NULL,
  severity       text        NOT NULL CHECK (severity IN ('info', 'warning', 'critical')),
  description    text,
  version        integer     NOT NULL CHECK (version > 0),
  state          text        NOT NULL CHECK (state IN ('valid', 'invalid')),
  errors         jsonb       NOT NULL DEFAULT '[]',
  schema_version integer     NOT NULL,
  created_at     timestamptz NOT NULL DEFAULT now(),
  updated_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (world_id, name)
);

CREATE TABLE alerts (
  id                     uuid        PRIMARY KEY,
  world_id               text        NOT NULL,
  rule                   text        NOT NULL,
  rule_version           integer     NOT NULL,
  alert_type             text        NOT NULL,
  severity               text        NOT NULL,
  object_type            text        NOT NULL,
  pk                     text        NOT NULL,
  status                 text        NOT NULL CHECK (status IN ('OPEN', 'CLEARED')),
  raised_at              timestamptz NOT NULL DEFAULT now(),
  raised_object_version  bigint      NOT NULL,
  cleared_at             timestamptz,
  cleared_object_version bigint,
  clear_reason           text,
  raised_seq             bigint      NOT NULL,
  cleared_seq            bigint,
  CHECK ((status = 'CLEARED') = (cleared_at IS NOT NULL))
);
-- Edge-triggered rules: at most one open alert per world, rule and object, whatever races.
CREATE UNIQUE INDEX alerts_one_open ON alerts (world_id, rule, object_type, pk) WHERE status = 'OPEN';
-- Listing, newest first (ids are UUIDv7, so in time order).
CREATE INDEX alerts_by_world ON alerts (world_id, id DESC);
