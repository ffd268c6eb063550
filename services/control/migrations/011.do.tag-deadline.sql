-- A tag that data or intelligence does not answer within TAG_TIMEOUT_MS is FAILED, with the
-- services that did not answer; a late reply then changes nothing (delete it and tag again).
ALTER TABLE world_tags DROP CONSTRAINT world_tags_status_check;
ALTER TABLE world_tags ADD CONSTRAINT world_tags_status_check CHECK (status IN ('PENDING', 'COMPLETE', 'FAILED'));
ALTER TABLE world_tags ADD COLUMN failure text;
CREATE INDEX world_tags_pending ON world_tags (created_at) WHERE status = 'PENDING';
