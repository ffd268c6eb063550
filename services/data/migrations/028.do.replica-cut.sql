-- The newest commit point cut on the primary for the read replicas (docs/adr/0083): written in the
-- transaction that cut it, so a replica that shows the row has replayed every write up to it. A
-- read without a consistency token is served at it by a replica, with no round trip to the primary.
CREATE TABLE replica_cut (
  one     boolean     PRIMARY KEY DEFAULT true CHECK (one),
  commit  bigint      NOT NULL,
  cut_at  timestamptz NOT NULL DEFAULT now()
);
