-- Objects and links of every world, stored so that a world can be a branch of another
-- (docs/adr/0008): heads hold the current state of what was written IN a world, history keeps
-- every version for reads at a commit, and one global sequence orders every write.

-- Every write takes the next value. CACHE 1 (the default) matters: a commit is cut by locking the
-- tables below in SHARE mode and reading last_value, which is only an upper bound of the values
-- in use when no session holds pre-allocated ones.
CREATE SEQUENCE data_seq AS bigint CACHE 1;

-- A world forked from another reads the base world's state at base_seq wherever it has no head
-- of its own (filled by the branching issue; NULL for a world that starts empty).
ALTER TABLE worlds
  ADD COLUMN base_world text,
  ADD COLUMN base_seq   bigint;

CREATE TABLE object_heads (
  world_id       text        NOT NULL,
  type           text        NOT NULL,
  pk             text        NOT NULL,
  version        bigint      NOT NULL CHECK (version > 0),
  seq            bigint      NOT NULL,
  -- A tombstone: hides the key (and, in a fork, the base world's object) until written again.
  deleted        boolean     NOT NULL DEFAULT false,
  properties     jsonb,
  schema_version integer     NOT NULL,
  created_at     timestamptz NOT NULL DEFAULT now(),
  updated_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (world_id, type, pk),
  CHECK (deleted = (properties IS NULL))
) WITH (fillfactor = 90);

-- Append-only: one row per version, for reads at a commit (seq <= c) and for merges.
CREATE TABLE object_history (
  world_id       text        NOT NULL,
  type           text        NOT NULL,
  pk             text        NOT NULL,
  seq            bigint      NOT NULL,
  version        bigint      NOT NULL,
  deleted        boolean     NOT NULL,
  properties     jsonb,
  schema_version integer     NOT NULL,
  actor          text        NOT NULL,
  request_id     text,
  written_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (world_id, type, pk, seq)
);

-- from_one / to_one carry the link type's cardinality at write time: the partial unique indexes
-- below make "at most one live link on this side" race-free.
CREATE TABLE link_heads (
  world_id   text        NOT NULL,
  link_type  text        NOT NULL,
  from_pk    text        NOT NULL,
  to_pk      text        NOT NULL,
  from_type  text        NOT NULL,
  to_type    text        NOT NULL,
  from_one   boolean     NOT NULL,
  to_one     boolean     NOT NULL,
  version    bigint      NOT NULL CHECK (version > 0),
  seq        bigint      NOT NULL,
  deleted    boolean     NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (world_id, link_type, from_pk, to_pk)
);
CREATE INDEX link_heads_to ON link_heads (world_id, link_type, to_pk, from_pk);
CREATE UNIQUE INDEX link_heads_one_per_from ON link_heads (world_id, link_type, from_pk) WHERE from_one AND NOT deleted;
CREATE UNIQUE INDEX link_heads_one_per_to ON link_heads (world_id, link_type, to_pk) WHERE to_one AND NOT deleted;

CREATE TABLE link_history (
  world_id   text        NOT NULL,
  link_type  text        NOT NULL,
  from_pk    text        NOT NULL,
  to_pk      text        NOT NULL,
  seq        bigint      NOT NULL,
  version    bigint      NOT NULL,
  deleted    boolean     NOT NULL,
  actor      text        NOT NULL,
  request_id text,
  written_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (world_id, link_type, from_pk, to_pk, seq)
);
