-- The worlds this service has provisioned, as control asked on onto.worlds.
CREATE TABLE worlds (
  id             text        PRIMARY KEY,
  parent_world   text,
  provisioned_at timestamptz NOT NULL DEFAULT now()
);
