-- The history of every world's definitions and the merges of definitions (docs/adr/0039).

-- One global sequence over every definition change: a world's definition position is the
-- greatest seq of its history, and positions of different worlds are comparable.
CREATE SEQUENCE definition_seq AS bigint;

-- Every change of a definition, appended in the transaction that makes it (PUT, DELETE, a fork's
-- copy, a merge). body is what a PUT says (its defaults filled in), NULL for a deletion. The
-- state a revalidation gives (valid, errors, schema version) is not a change of the definition.
CREATE TABLE definition_history (
  world_id   text        NOT NULL,
  kind       text        NOT NULL CHECK (kind IN ('derived', 'rule', 'decision')),
  name       text        NOT NULL,
  version    integer     NOT NULL,
  body       jsonb,
  seq        bigint      NOT NULL DEFAULT nextval('definition_seq'),
  written_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (world_id, seq)
);
-- The definitions of a world at a position: per (kind, name), the newest row at or below it.
CREATE INDEX definition_history_by_name ON definition_history (world_id, kind, name, seq DESC);

-- The bodies as the application writes them (services/intelligence/src/merges/history.ts).
INSERT INTO definition_history (world_id, kind, name, version, body, written_at)
SELECT world_id, 'derived', name, version,
       jsonb_strip_nulls(jsonb_build_object('objectType', object_type, 'expression', expression,
         'aggregates', aggregates, 'maxStalenessMs', max_staleness_ms, 'description', description)),
       updated_at
  FROM derived_definitions
UNION ALL
SELECT world_id, 'rule', name, version,
       jsonb_strip_nulls(jsonb_build_object('objectType', object_type, 'condition', condition,
         'alertType', alert_type, 'severity', severity, 'description', description)),
       updated_at
  FROM rules
UNION ALL
SELECT world_id, 'decision', name, version,
       jsonb_strip_nulls(jsonb_build_object('rule', rule, 'alertType', alert_type, 'actionType', action_type,
         'parameters', parameters, 'approval', approval, 'description', description)),
       updated_at
  FROM decision_definitions
ORDER BY 6;

-- intelligence's part of a merge (docs/adr/0037): the points it read, the plan (one entry per
-- definition the merge decides on, with the target version it read) and what the apply replaced.
CREATE TABLE definition_merges (
  id              uuid        PRIMARY KEY,
  source          text        NOT NULL,
  target          text        NOT NULL,
  strategy        text        NOT NULL,
  dry_run         boolean     NOT NULL,
  base_world      text,
  base_position   bigint      NOT NULL,
  source_position bigint      NOT NULL,
  target_position bigint      NOT NULL,
  schema          jsonb       NOT NULL,
  entries         jsonb       NOT NULL,
  -- planned → applied → compensated; planned → cancelled (compensated before it applied).
  status          text        NOT NULL CHECK (status IN ('planned', 'applied', 'compensated', 'cancelled')),
  applied         jsonb,
  applied_position bigint,
  replaced        jsonb,
  created_at      timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX definition_merges_by_target ON definition_merges (target, created_at DESC);
