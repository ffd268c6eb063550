-- Sent marks, one row per published batch instead of an update of every outbox row: marking a
-- batch of 1,000 sent was 1,000 tuple updates, a third of the relay's PostgreSQL time. sent_at is
-- when the mark was written, after the broker acknowledged the batch. A row sent is one out of
-- outbox_pending; outbox_sent_rows says when, until the row is pruned with its batch.
CREATE TABLE outbox_sent (
  sent_at timestamptz NOT NULL DEFAULT statement_timestamp(),
  ids     bigint[]    NOT NULL
);
CREATE INDEX outbox_sent_sent_at ON outbox_sent USING brin (sent_at);

INSERT INTO outbox_sent (sent_at, ids)
SELECT sent_at, array_agg(id ORDER BY id) FROM outbox WHERE sent_at IS NOT NULL GROUP BY sent_at;
ALTER TABLE outbox DROP COLUMN sent_at;
-- Outbox rows are no longer updated when sent (only attempts/last_error on a failed publish).
ALTER TABLE outbox SET (fillfactor = 100);

CREATE VIEW outbox_sent_rows AS SELECT unnest(ids) AS id, sent_at FROM outbox_sent;
