-- Named points of a world's history. A world-level commit is the vector of each service's
-- own version; control's part is the schema version, the others join as they gain commits.
CREATE TABLE world_tags (
  world_id   text        NOT NULL REFERENCES worlds (id),
  name       text        NOT NULL,
  ref        jsonb       NOT NULL,
  created_by text        NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (world_id, name)
);
