-- Merges of worlds (issue 17, docs/adr/0037). Control keeps the lineage a merge base is computed
-- from: forks (worlds.parent_*) and MERGED merges (source point read, target point after).

-- intelligence's definition position a fork starts at (intelligence.world.provisioned {base}).
ALTER TABLE worlds ADD COLUMN parent_definitions bigint;

CREATE TABLE merges (
  id                    uuid        PRIMARY KEY,
  target                text        NOT NULL REFERENCES worlds (id),
  source                text        NOT NULL REFERENCES worlds (id),
  strategy              text        NOT NULL CHECK (strategy IN ('SOURCE_WINS', 'TARGET_WINS', 'TIMESTAMP_WINS', 'MANUAL')),
  dry_run               boolean     NOT NULL DEFAULT false,
  status                text        NOT NULL CHECK (status IN ('RUNNING', 'CONFLICTS', 'MERGED', 'FAILED', 'COMPENSATED')),
  phase                 text        NOT NULL CHECK (phase IN ('planning', 'conflicts', 'applying', 'compensating', 'done')),
  -- {world, schemaVersion, dataSeq, definitions}, NULL when the worlds share no history.
  base                  jsonb,
  -- The points read: control's schema versions at POST, data's and intelligence's from their plans.
  source_schema_version integer     NOT NULL,
  target_schema_version integer     NOT NULL,
  source_data_seq       bigint,
  source_definitions    bigint,
  -- control's part: the merged schema (resolutions applied), the version it was written as, and
  -- the version that undid it.
  merged_schema         jsonb       NOT NULL,
  applied_schema_version     integer,
  compensated_schema_version integer,
  -- The merge commit when MERGED: {schemaVersion, dataSeq, definitions} of the target after it.
  result                jsonb,
  -- {service, phase, status, reason, field?} of the first failure.
  failure               jsonb,
  actor                 text        NOT NULL,
  -- When both plans were in (the conflict rate counts merges that got this far).
  planned_at            timestamptz,
  deadline_at           timestamptz,
  created_at            timestamptz NOT NULL DEFAULT now(),
  updated_at            timestamptz NOT NULL DEFAULT now()
);
-- One merge at a time runs against a target: a second POST or apply is a unique violation (409).
CREATE UNIQUE INDEX merges_one_running ON merges (target) WHERE status = 'RUNNING';
CREATE INDEX merges_by_target ON merges (target, created_at DESC, id DESC);
CREATE INDEX merges_by_source ON merges (source) WHERE status = 'MERGED';
CREATE INDEX merges_deadline ON merges (deadline_at) WHERE deadline_at IS NOT NULL;

-- data's and intelligence's part of each merge, as their replies report it.
CREATE TABLE merge_parts (
  merge_id    uuid        NOT NULL REFERENCES merges (id),
  service     text        NOT NULL CHECK (service IN ('data', 'intelligence')),
  state       text        NOT NULL CHECK (state IN ('planned', 'applied', 'failed', 'compensated')),
  source_pos  bigint,
  target_pos  bigint,      -- read at plan; after the apply, the position the apply reached
  changes     jsonb       NOT NULL DEFAULT '{}',
  conflicts   integer     NOT NULL DEFAULT 0,
  applied     jsonb,
  reverted    jsonb,
  not_reverted jsonb,
  failure     jsonb,
  updated_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (merge_id, service)
);

CREATE TABLE merge_conflicts (
  merge_id         uuid        NOT NULL REFERENCES merges (id),
  seq              bigserial,
  id               text        NOT NULL CHECK (id ~ '^[cdi]-[0-9]+$'),
  type             text        NOT NULL CHECK (type IN ('MODIFY_MODIFY', 'MODIFY_DELETE', 'SCHEMA_CONFLICT', 'RULE_CONFLICT')),
  entity           jsonb       NOT NULL,
  base             jsonb,
  source           jsonb,
  target           jsonb,
  source_at        timestamptz,
  target_at        timestamptz,
  reason           text,
  -- A conflict no strategy settles (a merged type or object that fails the merged schema).
  needs_person     boolean     NOT NULL DEFAULT false,
  resolution_take  text        CHECK (resolution_take IN ('source', 'target', 'value')),
  resolution_value jsonb,
  resolved_by      text,
  resolved_at      timestamptz,
  PRIMARY KEY (merge_id, id)
);
CREATE INDEX merge_conflicts_order ON merge_conflicts (merge_id, seq);

-- merge-verify runs: control's own check and data's and intelligence's replies.
CREATE TABLE merge_verifications (
  id           uuid        PRIMARY KEY,
  merge_id     uuid        NOT NULL REFERENCES merges (id),
  requested_by text        NOT NULL,
  control      jsonb       NOT NULL,
  data         jsonb,
  intelligence jsonb,
  created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX merge_verifications_by_merge ON merge_verifications (merge_id, created_at DESC);
