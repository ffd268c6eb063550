-- The CDC consumer's memory (services/data/src/cdc): per source and object, the source position
-- (lsn, else ts_ms) of the last change applied to it. Written in the transaction that applies the
-- change, so that a redelivered or older change event is recognised and skipped.
CREATE TABLE cdc_positions (
  source     text        NOT NULL,
  world_id   text        NOT NULL,
  type       text        NOT NULL,
  pk         text        NOT NULL,
  position   numeric     NOT NULL,
  -- Where the last applied change was read, for operators.
  topic      text        NOT NULL,
  partition  integer     NOT NULL,
  "offset"   bigint      NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (source, world_id, type, pk)
);
