-- Time series (docs/adr/0028). A series is one time-series property of one object of one world;
-- its points are (series, time, value), natively range-partitioned by day on time so that
-- retention drops whole partitions. Keys are spelled once, in series_keys, not on every point.
CREATE TABLE series_keys (
  id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  world_id text NOT NULL,
  type     text NOT NULL,
  pk       text NOT NULL,
  series   text NOT NULL,
  UNIQUE (world_id, type, pk, series)
);

-- num holds double, integer (exact up to 2^53) and boolean (0/1) points; label holds enum points.
-- seq is data's seq of the batch that last wrote the point: a read at a data commit c (branches,
-- docs/adr/0023) takes the points with seq <= c.
CREATE TABLE series_points (
  series_id bigint      NOT NULL,
  time      timestamptz NOT NULL,
  seq       bigint      NOT NULL,
  num       double precision,
  label     text,
  PRIMARY KEY (series_id, time)
) PARTITION BY RANGE (time);

-- The partition of one UTC day, created when missing; concurrent callers serialise on a lock.
CREATE FUNCTION series_partition_ensure(day date) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
  name text := 'series_points_p' || to_char(day, 'YYYYMMDD');
BEGIN
  IF to_regclass(name) IS NOT NULL THEN
    RETURN false;
  END IF;
  PERFORM pg_advisory_xact_lock(hashtext('series_points partitions'));
  IF to_regclass(name) IS NOT NULL THEN
    RETURN false;
  END IF;
  EXECUTE format(
    'CREATE TABLE %I PARTITION OF series_points FOR VALUES FROM (%L) TO (%L)',
    name, (day::timestamp AT TIME ZONE 'UTC'), ((day + 1)::timestamp AT TIME ZONE 'UTC'));
  RETURN true;
END $$;

-- Drops the day partitions that end at or before `horizon`; answers their names.
CREATE FUNCTION series_partitions_drop_before(horizon timestamptz) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
  part record;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtext('series_points partitions'));
  FOR part IN
    SELECT c.relname
      FROM pg_inherits i
      JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'series_points'::regclass
       AND c.relname ~ '^series_points_p[0-9]{8}$'
       AND (to_date(substr(c.relname, 16), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC' <= horizon
     ORDER BY c.relname
  LOOP
    EXECUTE format('DROP TABLE %I', part.relname);
    RETURN NEXT part.relname;
  END LOOP;
END $$;

-- Today's partition and the next week's, so that a fresh database takes points at once.
SELECT series_partition_ensure((now() AT TIME ZONE 'UTC')::date + d) FROM generate_series(-1, 7) AS d;
