-- A world's protection as control set it (docs/adr/0058), from world.protection.updated: a world
-- that takes changes by merge only starts no action from a request unless allow_actions; the
-- approvals and checks its merges need are kept with it.
ALTER TABLE worlds ADD COLUMN require_merge boolean NOT NULL DEFAULT false;
ALTER TABLE worlds ADD COLUMN allow_actions boolean NOT NULL DEFAULT false;
ALTER TABLE worlds ADD COLUMN required_approvals integer NOT NULL DEFAULT 0;
ALTER TABLE worlds ADD COLUMN required_checks text[] NOT NULL DEFAULT '{}';
ALTER TABLE worlds ADD COLUMN protection_revision integer NOT NULL DEFAULT 0;
