-- Series on branches (docs/adr/0030): a point overwritten keeps its former value here, so that a
-- read at an older commit (a fork's base at its fork point, ?at=) answers the value it had then.
-- A row is the point's value for seq <= c < superseded_seq, as object_history's rows are.
CREATE TABLE series_point_history (
  series_id      bigint      NOT NULL,
  time           timestamptz NOT NULL,
  seq            bigint      NOT NULL,
  superseded_seq bigint      NOT NULL,
  num            double precision,
  label          text,
  PRIMARY KEY (series_id, time, seq)
);

-- Only an overwrite fires it (ON CONFLICT … DO UPDATE): appends, the bulk of ingest, pay nothing.
CREATE FUNCTION series_point_superseded() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO series_point_history (series_id, time, seq, superseded_seq, num, label)
  VALUES (OLD.series_id, OLD.time, OLD.seq, NEW.seq, OLD.num, OLD.label)
  ON CONFLICT DO NOTHING;
  RETURN NEW;
END $$;

CREATE TRIGGER series_point_superseded BEFORE UPDATE ON series_points
  FOR EACH ROW EXECUTE FUNCTION series_point_superseded();

-- One row per written batch of points: when it committed (a ref given as an instant resolves to
-- the greatest commit written at or before it, series batches included), and the table whose
-- ROW EXCLUSIVE lock a batch holds while it takes its seq, which the commit cut's SHARE lock waits for.
CREATE TABLE series_batches (
  world_id   text        NOT NULL,
  seq        bigint      NOT NULL,
  written_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (world_id, seq)
);
