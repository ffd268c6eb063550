-- Tags name the vector {control, data, intelligence} (docs/adr/0029): a tag is PENDING until data
-- and intelligence have replied to the request named here with their positions, then COMPLETE.
-- Tags made before name a schema version only; they stay COMPLETE as they are.
ALTER TABLE world_tags
  ADD COLUMN status     text NOT NULL DEFAULT 'COMPLETE' CHECK (status IN ('PENDING', 'COMPLETE')),
  ADD COLUMN request_id uuid;
