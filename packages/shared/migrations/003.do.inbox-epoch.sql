-- Scopes the inbox's Redis fast path to this database: Redis keys carry the epoch (and the
-- database's oid), so a database recreated, or cloned from a template, never trusts markers
-- that another database's inbox left in Redis. After restoring this database from a backup,
-- draw a new epoch: UPDATE kernel_meta SET inbox_epoch = gen_random_uuid();
CREATE TABLE kernel_meta (
  singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  inbox_epoch uuid    NOT NULL DEFAULT gen_random_uuid()
);
INSERT INTO kernel_meta DEFAULT VALUES;
