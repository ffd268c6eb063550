-- Indexes follow the queries (docs/adr/0048): an indexed property may need more than one index —
-- a B-tree of its stored value (equality, ranges, order), a GIN of an array (containment) and a
-- GIN of a string's words (full-text search) — so a request names its kind.
ALTER TABLE storage_indexes
  ADD COLUMN kind text NOT NULL DEFAULT 'btree' CHECK (kind IN ('btree', 'gin', 'text'));
ALTER TABLE storage_indexes DROP CONSTRAINT storage_indexes_object_type_property_key;
ALTER TABLE storage_indexes ADD CONSTRAINT storage_indexes_object_type_property_kind_key
  UNIQUE (object_type, property, kind);
