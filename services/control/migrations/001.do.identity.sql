-- Identity (docs/adr/0006): users, platform administrators, roles per world, API tokens (only
-- their SHA-256 is kept), the Ed25519 keys that sign access tokens, and revocations.
CREATE TABLE users (
  id               text        PRIMARY KEY,
  display_name     text,
  created_at       timestamptz NOT NULL DEFAULT now(),
  created_by       text,
  -- Access tokens carry the generation they were issued at; taking a role away raises it, which
  -- revokes every access token issued before (they carry the role that was taken).
  token_generation integer     NOT NULL DEFAULT 0
);

CREATE TABLE platform_admins (
  user_id    text        PRIMARY KEY REFERENCES users (id),
  granted_at timestamptz NOT NULL DEFAULT now(),
  granted_by text
);

CREATE TABLE world_roles (
  world_id   text        NOT NULL,
  user_id    text        NOT NULL REFERENCES users (id),
  role       text        NOT NULL CHECK (role IN ('viewer', 'editor', 'owner')),
  granted_at timestamptz NOT NULL DEFAULT now(),
  granted_by text,
  PRIMARY KEY (world_id, user_id)
);
CREATE INDEX world_roles_user ON world_roles (user_id);

CREATE TABLE api_tokens (
  id           uuid        PRIMARY KEY,
  user_id      text        NOT NULL REFERENCES users (id),
  name         text,
  hash         bytea       NOT NULL UNIQUE CHECK (length(hash) = 32),
  created_at   timestamptz NOT NULL DEFAULT now(),
  revoked_at   timestamptz,
  last_used_at timestamptz
);
CREATE INDEX api_tokens_user ON api_tokens (user_id);

-- Private keys are stored as JWKs in the clear: this database is control's alone.
CREATE TABLE signing_keys (
  kid         text        PRIMARY KEY,
  private_jwk jsonb       NOT NULL,
  public_jwk  jsonb       NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  retired_at  timestamptz
);
-- At most one key signs at a time; two instances booting at once agree on it.
CREATE UNIQUE INDEX signing_keys_one_active ON signing_keys ((true)) WHERE retired_at IS NULL;

-- Every revocation control has published, and the single access tokens it refuses.
CREATE TABLE revocations (
  id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  kind       text        NOT NULL CHECK (kind IN ('api_token', 'access_token', 'user_generation')),
  user_id    text        NOT NULL,
  token_id   text,
  generation integer,
  expires_at timestamptz,
  revoked_at timestamptz NOT NULL DEFAULT now(),
  revoked_by text,
  request_id text
);
CREATE UNIQUE INDEX revocations_access_token ON revocations (token_id) WHERE kind = 'access_token';
