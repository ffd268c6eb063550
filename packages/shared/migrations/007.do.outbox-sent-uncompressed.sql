-- A sent mark's id array (8 kB for a batch of 1,000) is stored out of line without compression.
-- Increasing bigints never shrank enough for pglz to keep its result, but pglz tried the whole
-- array on every mark first: about 5% of the relay's PostgreSQL time (perf, ./onto bench relay).
ALTER TABLE outbox_sent ALTER COLUMN ids SET STORAGE EXTERNAL;
