-- The points of data's time series that derived properties read windows of (docs/adr/0028),
-- from series.points.written on onto.series.points. A point's seq is data's seq of its batch.
CREATE TABLE rm_series_points (
  world_id text             NOT NULL,
  type     text             NOT NULL,
  pk       text             NOT NULL,
  series   text             NOT NULL,
  time     timestamptz      NOT NULL,
  num      double precision,
  seq      bigint           NOT NULL,
  PRIMARY KEY (world_id, type, pk, series, time)
);
