-- Executions of action types (docs/adr/0011): an action, its steps as planned from the action
-- type's edits, and each step's progress through the saga on domain.actions. Dropping a world
-- drops its actions.
CREATE TABLE actions (
  world_id        text        NOT NULL REFERENCES worlds (id) ON DELETE CASCADE,
  id              uuid        NOT NULL,
  action_type     text        NOT NULL,
  -- The parameters as checked (instants in UTC), and the schema version they were checked with.
  parameters      jsonb       NOT NULL,
  schema_version  integer     NOT NULL,
  status          text        NOT NULL
                  CHECK (status IN ('RUNNING', 'COMPENSATING', 'COMPLETED', 'COMPENSATED', 'FAILED')),
  actor           text        NOT NULL,
  idempotency_key text,
  -- The event that caused the action (a decision's), when one did.
  caused_by       uuid,
  -- Transitions so far: the version of the action's events.
  revision        integer     NOT NULL DEFAULT 1,
  -- The refusal that turned the saga back, and the one that stopped its compensation.
  refusal         jsonb,
  created_at      timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now(),
  finished_at     timestamptz,
  PRIMARY KEY (world_id, id)
);
CREATE INDEX actions_by_status ON actions (world_id, status, id DESC);
CREATE INDEX actions_by_type ON actions (world_id, action_type, id DESC);

-- One row per edit of the action type, in order. `command` is what was asked of data; the
-- compensation columns fill in when the saga turns back.
CREATE TABLE action_steps (
  world_id             text        NOT NULL,
  action_id            uuid        NOT NULL,
  n                    integer     NOT NULL CHECK (n >= 0),
  command              jsonb       NOT NULL,
  state                text        NOT NULL CHECK (state IN ('PENDING', 'REQUESTED', 'COMPLETED', 'REFUSED', 'SKIPPED',
                                                             'COMPENSATING', 'COMPENSATED', 'COMPENSATION_REFUSED')),
  -- The action.step.requested event whose reply the step awaits: a reply to any other is stale.
  request_event        uuid,
  result               jsonb,
  refusal              jsonb,
  compensation         jsonb,
  compensation_result  jsonb,
  compensation_refusal jsonb,
  updated_at           timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (world_id, action_id, n),
  FOREIGN KEY (world_id, action_id) REFERENCES actions (world_id, id) ON DELETE CASCADE
);

-- Idempotency keys (the Idempotency-Key header, scoped per world and caller; and the action
-- type's own key parameters, scoped per world and action type): the authoritative record, written
-- in the transaction that records the action, with the response to replay. Pruned when expired.
CREATE TABLE idempotency_keys (
  world_id    text        NOT NULL REFERENCES worlds (id) ON DELETE CASCADE,
  scope       text        NOT NULL,
  key         text        NOT NULL,
  -- sha256 of the canonical JSON of world, action type and parameters.
  fingerprint text        NOT NULL,
  action_id   uuid        NOT NULL,
  -- {status, body, headers} as first answered.
  response    jsonb       NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  expires_at  timestamptz NOT NULL,
  PRIMARY KEY (world_id, scope, key)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);
