-- data's part of three-way merges of worlds (docs/adr/0037, 0038): the plan a merge request
-- made, kept until the merge is applied, compensated or verified.

CREATE TABLE merges (
  id             uuid        PRIMARY KEY,
  target         text        NOT NULL,
  source         text        NOT NULL,
  strategy       text        NOT NULL CHECK (strategy IN ('SOURCE_WINS', 'TARGET_WINS', 'TIMESTAMP_WINS', 'MANUAL')),
  dry_run        boolean     NOT NULL,
  actor          text        NOT NULL,
  -- The merge base: a world at a data commit; NULL when the two worlds share no history.
  base_world     text,
  base_seq       bigint,
  -- The commit source and target were read at (one cut, taken when the plan was made).
  source_seq     bigint      NOT NULL,
  target_seq     bigint      NOT NULL,
  -- planned → applied → compensated; planned → compensated (a compensation before the apply).
  status         text        NOT NULL CHECK (status IN ('planned', 'applied', 'compensated')),
  -- The merged schema the plan checked objects against, then the version and document applied.
  schema         jsonb       NOT NULL,
  schema_version integer,
  -- data's commit after the apply: the merge commit.
  commit_seq     bigint,
  planned_at     timestamptz NOT NULL DEFAULT now(),
  applied_at     timestamptz,
  CHECK ((base_world IS NULL) = (base_seq IS NULL))
);
CREATE INDEX merges_target ON merges (target, planned_at);

-- One object or link the merge may write. Objects: `type`, `pk`; links: `type` is the link type,
-- `pk` the from pk and `to_pk` the to pk (and from_type, to_type its ends). States are property
-- maps (objects; NULL = absent or deleted) or true/NULL (links: live or not).
CREATE TABLE merge_items (
  merge_id     uuid    NOT NULL REFERENCES merges (id) ON DELETE CASCADE,
  n            integer NOT NULL,
  kind         text    NOT NULL CHECK (kind IN ('object', 'link')),
  type         text    NOT NULL,
  pk           text    NOT NULL,
  to_pk        text    NOT NULL DEFAULT '',
  from_type    text,
  to_type      text,
  base         jsonb,
  source       jsonb,
  target       jsonb,
  -- The target's own head as the plan read it (NULL: none, the state inherited or absent): the
  -- apply writes only where the head still is this one.
  target_seq     bigint,
  target_version bigint,
  -- The merged state with every conflict settled by the strategy (or, open, at the target's value).
  merged       jsonb,
  -- After the apply: the version and seq the merge wrote (NULL: nothing written), for the
  -- compensation, which writes `target` back where the head still is this seq.
  written_version bigint,
  written_seq     bigint,
  PRIMARY KEY (merge_id, n)
);

-- The conflicts of an item: per property (MODIFY_MODIFY), whole object (MODIFY_DELETE,
-- SCHEMA_CONFLICT) or link. `take` is how it is settled: by the strategy, or by a person
-- (world.merge.conflict.resolved); NULL while open.
CREATE TABLE merge_conflicts (
  merge_id   uuid    NOT NULL REFERENCES merges (id) ON DELETE CASCADE,
  id         text    NOT NULL,
  item       integer NOT NULL,
  type       text    NOT NULL,
  property   text,
  body       jsonb   NOT NULL,
  take       text    CHECK (take IN ('source', 'target', 'value')),
  value      jsonb,
  resolved_by text   CHECK (resolved_by IN ('strategy', 'person')),
  PRIMARY KEY (merge_id, id)
);
