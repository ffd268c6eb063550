-- This service's replica of onto.identity (docs/adr/0006): control's public signing keys, the
-- revocations it published and the watermark of its latest heartbeat. Every write that adds
-- keys or revocations bumps identity_replica.revision under that row's lock and stamps its rows
-- with it, so revisions commit in order and readers load "everything after revision n".
CREATE TABLE identity_replica (
  singleton    boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  -- Every identity event control committed before this instant (ms since the epoch) is applied.
  watermark_ms bigint,
  revision     bigint  NOT NULL DEFAULT 0
);
INSERT INTO identity_replica DEFAULT VALUES;

CREATE TABLE identity_keys (
  kid         text        PRIMARY KEY,
  jwk         jsonb       NOT NULL,
  revision    bigint      NOT NULL,
  received_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX identity_keys_revision ON identity_keys (revision);

-- Revoked API tokens (every access token exchanged from one) and single access tokens.
CREATE TABLE identity_revocations (
  kind        text        NOT NULL CHECK (kind IN ('api_token', 'access_token')),
  token_id    text        NOT NULL,
  user_id     text        NOT NULL,
  -- Access tokens: when the token expires anyway and the revocation stops mattering.
  expires_at  timestamptz,
  revision    bigint      NOT NULL,
  received_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (kind, token_id)
);
CREATE INDEX identity_revocations_revision ON identity_revocations (revision);

-- Access tokens of a user whose generation (`gen` claim) is below min_generation are revoked:
-- control raises it when it takes a role away.
CREATE TABLE identity_user_generations (
  user_id        text    PRIMARY KEY,
  min_generation integer NOT NULL,
  revision       bigint  NOT NULL
);
CREATE INDEX identity_user_generations_revision ON identity_user_generations (revision);
