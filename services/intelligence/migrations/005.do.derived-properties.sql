-- Derived properties (docs/adr/0010): definitions per world, their values per object, and the
-- bounded-batch recompute jobs that a new definition or a schema change starts.
CREATE TABLE derived_definitions (
  world_id         text        NOT NULL,
  name             text        NOT NULL,
  object_type      text        NOT NULL,
  expression       text        NOT NULL,
  aggregates       jsonb       NOT NULL DEFAULT '{}',
  max_staleness_ms integer     NOT NULL CHECK (max_staleness_ms > 0),
  description      text,
  -- Bumped by every change of the definition (its ETag).
  version          integer     NOT NULL CHECK (version > 0),
  -- invalid: the replicated schema no longer has what the expression refers to; not evaluated.
  state            text        NOT NULL CHECK (state IN ('valid', 'invalid')),
  errors           jsonb       NOT NULL DEFAULT '[]',
  -- The schema version the definition was last checked against.
  schema_version   integer     NOT NULL,
  -- Values computed before this instant are stale (the definition or what it reads changed).
  valid_since      timestamptz NOT NULL DEFAULT now(),
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (world_id, name)
);

CREATE TABLE derived_values (
  world_id           text        NOT NULL,
  object_type        text        NOT NULL,
  pk                 text        NOT NULL,
  name               text        NOT NULL,
  -- The value as JSON and its CEL kind (int, double, string, bool, null, list, map, ...); NULL
  -- with an error when the evaluation failed.
  value              jsonb,
  value_kind         text,
  error              jsonb,
  computed_at        timestamptz NOT NULL,
  definition_version integer     NOT NULL,
  -- The object's own version and the highest data write among everything the value read.
  source_version     bigint      NOT NULL,
  source_seq         bigint      NOT NULL,
  sources            jsonb       NOT NULL,
  PRIMARY KEY (world_id, object_type, pk, name),
  CHECK ((error IS NULL) = (value_kind IS NOT NULL))
);
CREATE INDEX derived_values_by_name ON derived_values (world_id, name);

-- Changes to a world's definitions (derived properties, rules, decision definitions) bump its
-- revision: evaluators cache the compiled model of a world per revision.
CREATE TABLE definition_revisions (
  world_id text   PRIMARY KEY,
  revision bigint NOT NULL
);

-- Recomputing a definition for every existing object of its type, a bounded batch at a time in
-- pk order: `after_pk` is where the next batch starts. Jobs are taken by due time
-- (created + the definition's max staleness), so that the tightest bound goes first.
CREATE TABLE recompute_jobs (
  id                 bigserial   PRIMARY KEY,
  world_id           text        NOT NULL,
  kind               text        NOT NULL CHECK (kind IN ('derived', 'rule')),
  name               text        NOT NULL,
  definition_version integer     NOT NULL,
  object_type        text        NOT NULL,
  after_pk           text,
  processed          bigint      NOT NULL DEFAULT 0,
  due_at             timestamptz NOT NULL,
  created_at         timestamptz NOT NULL DEFAULT now(),
  finished_at        timestamptz
);
CREATE INDEX recompute_jobs_pending ON recompute_jobs (due_at, id) WHERE finished_at IS NULL;
CREATE INDEX recompute_jobs_by_definition ON recompute_jobs (world_id, kind, name) WHERE finished_at IS NULL;
