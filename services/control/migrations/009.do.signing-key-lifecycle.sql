-- Signing-key lifecycle (docs/adr/0042): the private half sealed with ONTO_KEY_ENCRYPTION_KEY
-- (AES-256-GCM), and when a retired key stops verifying tokens. Rows stored in the clear by an
-- earlier version are sealed by control at boot (the key-encryption key is not in the database),
-- which then clears private_jwk; a retired key keeps no private half at all.
ALTER TABLE signing_keys ALTER COLUMN private_jwk DROP NOT NULL;
ALTER TABLE signing_keys ADD COLUMN private_key_sealed bytea;
-- Tokens signed by a retired key verify until then, and never after (control and the replicas).
ALTER TABLE signing_keys ADD COLUMN refused_after timestamptz;
UPDATE signing_keys SET refused_after = retired_at, private_jwk = NULL WHERE retired_at IS NOT NULL;
ALTER TABLE signing_keys ADD CONSTRAINT signing_keys_private_once
  CHECK (private_jwk IS NULL OR private_key_sealed IS NULL);
ALTER TABLE signing_keys ADD CONSTRAINT signing_keys_active_signs
  CHECK (retired_at IS NOT NULL OR num_nonnulls(private_jwk, private_key_sealed) = 1);
ALTER TABLE signing_keys ADD CONSTRAINT signing_keys_retired_refused
  CHECK ((retired_at IS NULL) = (refused_after IS NULL));
