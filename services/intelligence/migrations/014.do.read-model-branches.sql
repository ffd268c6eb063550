-- The read model as branches (docs/adr/0033, decision 2): a fork reads its base's read model,
-- derived values and alerts as of the fork point, recursively, and writes its own rows (copy on
-- write), which shadow the inherited ones. Data's equivalent is ADR 23 (world_chain, object_at).

-- A fork's base and the data commit it starts at, from data's `world.provisioned {base}`. Its
-- own table, not columns of `worlds`: the reply and `world.created` reach intelligence on two
-- consumers, in either order.
CREATE TABLE world_bases (
  world_id    text        PRIMARY KEY,
  base_world  text        NOT NULL,
  base_seq    bigint      NOT NULL CHECK (base_seq >= 0),
  recorded_at timestamptz NOT NULL DEFAULT now()
);

-- Whether the world was provisioned after this migration: only those forks get their commit
-- recorded (data's replies to older forks were consumed long ago), so only they wait for it;
-- older forks keep reading their own rows only.
ALTER TABLE worlds ADD COLUMN reads_through boolean NOT NULL DEFAULT false;
ALTER TABLE worlds ALTER COLUMN reads_through SET DEFAULT true;

-- Superseded versions, each its key's state for data seqs `seq <= c < superseded_seq`, so "the
-- key at c" is the head if its seq <= c, else the one history row whose interval holds c. Every
-- superseded version is kept (issue 16: history a child or a tag needs is never pruned; nothing
-- prunes it yet).
CREATE TABLE rm_objects_history (
  world_id       text   NOT NULL,
  type           text   NOT NULL,
  pk             text   NOT NULL,
  version        bigint NOT NULL,
  seq            bigint NOT NULL,
  superseded_seq bigint NOT NULL,
  deleted        boolean NOT NULL,
  properties     jsonb,
  PRIMARY KEY (world_id, type, pk, seq)
);

CREATE TABLE rm_links_history (
  world_id       text    NOT NULL,
  link_type      text    NOT NULL,
  from_pk        text    NOT NULL,
  to_pk          text    NOT NULL,
  from_type      text    NOT NULL,
  to_type        text    NOT NULL,
  version        bigint  NOT NULL,
  seq            bigint  NOT NULL,
  superseded_seq bigint  NOT NULL,
  deleted        boolean NOT NULL,
  PRIMARY KEY (world_id, link_type, from_pk, to_pk, seq)
);
CREATE INDEX rm_links_history_by_to ON rm_links_history (world_id, link_type, to_pk, from_pk, seq);
-- A fork's tombstone of an inherited link must be found from its `to` end too (rm_links_by_to
-- holds live links only); tombstones are few, so this costs live writes nothing.
CREATE INDEX rm_links_dead_by_to ON rm_links (to_pk, world_id, link_type) WHERE deleted;

-- A derived value holds from `valid_seq` on: the world's data watermark in the transaction that
-- computed it (a batch advances the watermark first, so it is the batch's highest write). A
-- recompute that leaves the value as it was keeps its `valid_seq`.
ALTER TABLE derived_values ADD COLUMN valid_seq bigint NOT NULL DEFAULT 0;
CREATE TABLE derived_values_history (
  world_id           text        NOT NULL,
  object_type        text        NOT NULL,
  pk                 text        NOT NULL,
  name               text        NOT NULL,
  value              jsonb,
  value_kind         text,
  error              jsonb,
  computed_at        timestamptz NOT NULL,
  definition_version integer     NOT NULL,
  source_version     bigint      NOT NULL,
  source_seq         bigint      NOT NULL,
  sources            jsonb       NOT NULL,
  valid_seq          bigint      NOT NULL,
  superseded_seq     bigint      NOT NULL CHECK (superseded_seq > valid_seq)
);
CREATE INDEX derived_values_history_by_key
  ON derived_values_history (world_id, object_type, pk, name, superseded_seq);

-- An alert is open for data seqs `raised_data_seq <= c < cleared_data_seq` (NULL: not cleared;
-- alerts older than this migration count as raised at 0).
ALTER TABLE alerts ADD COLUMN raised_data_seq bigint NOT NULL DEFAULT 0;
ALTER TABLE alerts ADD COLUMN cleared_data_seq bigint;

-- The world's data watermark as the current transaction sees it (0 before any change).
CREATE FUNCTION rm_world_seq(w text) RETURNS bigint LANGUAGE sql STABLE AS $$
  SELECT coalesce((SELECT seq FROM data_watermarks WHERE world_id = w), 0)
$$;

-- The world, then each base at its point (the smallest fork point on the way), nearest first.
-- The world itself reads its heads (point NULL).
CREATE FUNCTION rm_chain(w text) RETURNS TABLE (world_id text, point bigint, depth integer)
LANGUAGE sql STABLE AS $$
  WITH RECURSIVE c(world_id, point, depth) AS (
    SELECT w, NULL::bigint, 0
    UNION ALL
    SELECT b.base_world, least(b.base_seq, c.point), c.depth + 1
      FROM c JOIN world_bases b ON b.world_id = c.world_id
     WHERE c.depth < 64
  )
  SELECT c.world_id, c.point, c.depth FROM c
$$;

-- One object through the chain: the first world that wrote the key by its point decides (a
-- tombstone there: absent). Answers that world and its point.
CREATE FUNCTION rm_object_at(w text, t text, p text)
RETURNS TABLE (world_id text, point bigint, version bigint, seq bigint, deleted boolean, properties jsonb)
LANGUAGE sql STABLE AS $$
  SELECT c.world_id, c.point, o.version, o.seq, o.deleted, o.properties
    FROM rm_chain(w) c
   CROSS JOIN LATERAL (
     (SELECT r.version, r.seq, r.deleted, r.properties FROM rm_objects r
       WHERE r.world_id = c.world_id AND r.type = t AND r.pk = p AND (c.point IS NULL OR r.seq <= c.point))
     UNION ALL
     (SELECT h.version, h.seq, h.deleted, h.properties FROM rm_objects_history h
       WHERE c.point IS NOT NULL AND h.world_id = c.world_id AND h.type = t AND h.pk = p
         AND h.seq <= c.point AND h.superseded_seq > c.point)
     LIMIT 1
   ) o
   ORDER BY c.depth
   LIMIT 1
$$;

-- An object's derived values through the chain, per name: the nearest world with a value by its
-- point (a fork's recompute of an inherited object writes the fork's own row).
CREATE FUNCTION rm_derived_at(w text, t text, p text)
RETURNS TABLE (world_id text, name text, value jsonb, value_kind text, error jsonb, computed_at timestamptz,
               definition_version integer, source_version bigint, source_seq bigint, sources jsonb)
LANGUAGE sql STABLE AS $$
  SELECT DISTINCT ON (d.name) c.world_id, d.name, d.value, d.value_kind, d.error, d.computed_at,
         d.definition_version, d.source_version, d.source_seq, d.sources
    FROM rm_chain(w) c
   CROSS JOIN LATERAL (
     SELECT v.name, v.value, v.value_kind, v.error, v.computed_at, v.definition_version, v.source_version,
            v.source_seq, v.sources
       FROM derived_values v
      WHERE v.world_id = c.world_id AND v.object_type = t AND v.pk = p AND (c.point IS NULL OR v.valid_seq <= c.point)
     UNION ALL
     SELECT h.name, h.value, h.value_kind, h.error, h.computed_at, h.definition_version, h.source_version,
            h.source_seq, h.sources
       FROM derived_values_history h
      WHERE c.point IS NOT NULL AND h.world_id = c.world_id AND h.object_type = t AND h.pk = p
        AND h.superseded_seq > c.point AND h.valid_seq <= c.point
   ) d
   ORDER BY d.name, c.depth
$$;

-- The links of a type at one end through the chain, live or not (the caller keeps the live
-- ones): per link, the nearest world that wrote it by its point decides.
CREATE FUNCTION rm_links_out_at(w text, lt text, near text)
RETURNS TABLE (from_pk text, to_pk text, seq bigint, deleted boolean)
LANGUAGE sql STABLE AS $$
  SELECT DISTINCT ON (l.to_pk) l.from_pk, l.to_pk, l.seq, l.deleted
    FROM rm_chain(w) c
   CROSS JOIN LATERAL (
     SELECT r.from_pk, r.to_pk, r.seq, r.deleted FROM rm_links r
      WHERE r.world_id = c.world_id AND r.link_type = lt AND r.from_pk = near AND (c.point IS NULL OR r.seq <= c.point)
     UNION ALL
     SELECT h.from_pk, h.to_pk, h.seq, h.deleted FROM rm_links_history h
      WHERE c.point IS NOT NULL AND h.world_id = c.world_id AND h.link_type = lt AND h.from_pk = near
        AND h.seq <= c.point AND h.superseded_seq > c.point
   ) l
   ORDER BY l.to_pk, c.depth
$$;

CREATE FUNCTION rm_links_in_at(w text, lt text, near text)
RETURNS TABLE (from_pk text, to_pk text, seq bigint, deleted boolean)
LANGUAGE sql STABLE AS $$
  SELECT DISTINCT ON (l.from_pk) l.from_pk, l.to_pk, l.seq, l.deleted
    FROM rm_chain(w) c
   CROSS JOIN LATERAL (
     SELECT r.from_pk, r.to_pk, r.seq, r.deleted FROM rm_links r
      WHERE r.to_pk = near AND r.world_id = c.world_id AND r.link_type = lt AND NOT r.deleted
        AND (c.point IS NULL OR r.seq <= c.point)
     UNION ALL
     SELECT r.from_pk, r.to_pk, r.seq, r.deleted FROM rm_links r
      WHERE r.to_pk = near AND r.world_id = c.world_id AND r.link_type = lt AND r.deleted
        AND (c.point IS NULL OR r.seq <= c.point)
     UNION ALL
     SELECT h.from_pk, h.to_pk, h.seq, h.deleted FROM rm_links_history h
      WHERE c.point IS NOT NULL AND h.world_id = c.world_id AND h.link_type = lt AND h.to_pk = near
        AND h.seq <= c.point AND h.superseded_seq > c.point
   ) l
   ORDER BY l.from_pk, c.depth
$$;
