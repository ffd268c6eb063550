-- A world's history retention (docs/adr/0072): history is kept at least keep_days days (NULL:
-- forever) and at least the keep_versions newest versions of each key (NULL: no count rule).
-- control owns the policy; data learns it from world.retention.updated, ordered by `revision`.
-- A world without a row follows the defaults of control's configuration when it was created.
CREATE TABLE world_retention (
  world_id      text        PRIMARY KEY REFERENCES worlds (id) ON DELETE CASCADE,
  keep_days     integer     CHECK (keep_days >= 0),
  keep_versions integer     CHECK (keep_versions >= 1),
  revision      integer     NOT NULL DEFAULT 1,
  updated_by    text        NOT NULL,
  updated_at    timestamptz NOT NULL DEFAULT now()
);
