-- A token-signing key is announced before it signs (docs/adr/0042, amendment of issue 32): a
-- rotation publishes the new key at once and control signs with it only from `signs_from`, a
-- delay later, once the replicas have it. A key signs from its signs_from until the next key's;
-- a retired key keeps its private half until then, and is refused its grace after it stopped.
ALTER TABLE signing_keys ADD COLUMN signs_from timestamptz;
UPDATE signing_keys SET signs_from = created_at;
ALTER TABLE signing_keys ALTER COLUMN signs_from SET NOT NULL, ALTER COLUMN signs_from SET DEFAULT now();
