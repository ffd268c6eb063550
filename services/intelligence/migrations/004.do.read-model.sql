-- intelligence's read model (CQRS) of data's objects and links, fed by onto.changes.objects and
-- onto.changes.links. A row is only replaced by a newer version of its key; a delete leaves a
-- tombstone, so that an older event replayed later never brings the key back.
CREATE TABLE rm_objects (
  world_id       text        NOT NULL,
  type           text        NOT NULL,
  pk             text        NOT NULL,
  version        bigint      NOT NULL CHECK (version > 0),
  -- data's write sequence (the event's producer_seq) of this version.
  seq            bigint      NOT NULL,
  deleted        boolean     NOT NULL,
  properties     jsonb,
  schema_version integer     NOT NULL,
  updated_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (world_id, type, pk),
  CHECK (deleted = (properties IS NULL))
);

-- A link is its two ends; the primary key finds a link from its from end, the index below from
-- its to end, so that a change of either end finds the objects whose aggregates it feeds.
CREATE TABLE rm_links (
  world_id   text        NOT NULL,
  link_type  text        NOT NULL,
  from_pk    text        NOT NULL,
  to_pk      text        NOT NULL,
  from_type  text        NOT NULL,
  to_type    text        NOT NULL,
  version    bigint      NOT NULL CHECK (version > 0),
  seq        bigint      NOT NULL,
  deleted    boolean     NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (world_id, link_type, from_pk, to_pk)
);
CREATE INDEX rm_links_by_to ON rm_links (world_id, link_type, to_pk, from_pk) WHERE NOT deleted;
