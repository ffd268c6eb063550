-- intelligence's replica of each world's ontology schema, from schema.updated on onto.schema:
-- every version control published, with the whole document. The applied schema is the highest
-- version (a replayed or older event never moves it back), as in data.
CREATE TABLE schema_versions (
  world_id    text        NOT NULL,
  version     integer     NOT NULL CHECK (version > 0),
  document    jsonb       NOT NULL,
  diff        jsonb,
  event_id    uuid        NOT NULL,
  received_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (world_id, version)
);

-- How far intelligence has applied data's changes of a world: the highest data write sequence
-- (data's producer_seq) among the change events applied, raised in the transaction that applies
-- them. Reads given `X-Consistency-Token: data=<n>` wait until it reaches n (docs/adr/0012).
CREATE TABLE data_watermarks (
  world_id   text        PRIMARY KEY,
  seq        bigint      NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now()
);
