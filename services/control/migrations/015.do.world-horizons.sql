-- A world's retained history horizon as data announced it (storage.history.horizon v1, docs/adr/0072,
-- 0077): reads at an older data commit answer 410 unless a kept point names it. control shows it
-- with the world (GET /v1/worlds/{world}); only a greater horizon replaces it, so a redelivered or
-- late announcement changes nothing. No row: data has pruned nothing of the world.
CREATE TABLE world_horizons (
  world_id     text        PRIMARY KEY REFERENCES worlds (id) ON DELETE CASCADE,
  horizon_seq  bigint      NOT NULL CHECK (horizon_seq >= 0),
  -- When data moved the horizon there (the announcement's occurred_at).
  moved_at     timestamptz NOT NULL
);
