-- data's replica of each world's ontology schema, from schema.updated on onto.schema: every
-- version control published, with the whole document. A world's applied schema is its highest
-- version here, so a replayed or older event never moves it back (docs/adr/0008).
CREATE TABLE schema_versions (
  world_id    text        NOT NULL,
  version     integer     NOT NULL CHECK (version > 0),
  document    jsonb       NOT NULL,
  diff        jsonb,
  event_id    uuid        NOT NULL,
  received_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (world_id, version)
);

-- Expression indexes that indexed properties ask for: one partial index on object_heads per
-- (object type, property), shared by every world whose schema indexes that property. The schema
-- consumer requests them; a background builder creates them CONCURRENTLY, so that a new index
-- never blocks writes (docs/adr/0008).
CREATE TABLE storage_indexes (
  name         text        PRIMARY KEY,
  object_type  text        NOT NULL,
  property     text        NOT NULL,
  state        text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'building', 'ready', 'failed')),
  attempts     integer     NOT NULL DEFAULT 0,
  last_error   text,
  requested_at timestamptz NOT NULL DEFAULT now(),
  claimed_at   timestamptz,
  ready_at     timestamptz,
  UNIQUE (object_type, property)
);
CREATE INDEX storage_indexes_pending ON storage_indexes (requested_at) WHERE state IN ('pending', 'building');
