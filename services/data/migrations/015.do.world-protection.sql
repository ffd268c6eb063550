-- A world's protection as control set it (docs/adr/0058), from world.protection.updated: with
-- require_merge, direct writes of objects, links, bulk and series are refused (403), and actions'
-- edits too unless allow_actions. Read with the world in every write's context statement.
ALTER TABLE worlds ADD COLUMN require_merge boolean NOT NULL DEFAULT false;
ALTER TABLE worlds ADD COLUMN allow_actions boolean NOT NULL DEFAULT false;
ALTER TABLE worlds ADD COLUMN protection_revision integer NOT NULL DEFAULT 0;
