-- The names of each world's rules as intelligence last reported them (intelligence.rules.changed),
-- against which a protection's required_checks are checked (docs/adr/0058). `definitions` is
-- intelligence's definition position of the report: only a greater one replaces the list.
CREATE TABLE world_rules (
  world_id    text   PRIMARY KEY REFERENCES worlds (id) ON DELETE CASCADE,
  rules       text[] NOT NULL,
  definitions bigint NOT NULL
);
