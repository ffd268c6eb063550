-- A world's protection (docs/adr/0058): with require_merge, data refuses direct writes and
-- changes come by merge; a merge into it needs required_approvals approvals by owners other than
-- its author and none of required_checks (rules of intelligence) firing on the merged result.
-- `revision` orders the events that carry it to data and intelligence.
CREATE TABLE world_protection (
  world_id           text        PRIMARY KEY REFERENCES worlds (id) ON DELETE CASCADE,
  require_merge      boolean     NOT NULL,
  required_approvals integer     NOT NULL CHECK (required_approvals >= 0),
  required_checks    text[]      NOT NULL DEFAULT '{}',
  allow_actions      boolean     NOT NULL DEFAULT false,
  revision           integer     NOT NULL DEFAULT 1,
  updated_by         text        NOT NULL,
  updated_at         timestamptz NOT NULL DEFAULT now()
);
