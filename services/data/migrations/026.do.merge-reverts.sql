-- Reverts of merges (issue 32 item 4, docs/adr/0081): the merge a revert undoes. Its source is
-- the target just before that merge's writes and only the keys that merge wrote are candidates,
-- so merge-verify recomputes a revert from this column and the reverted merge's items.
ALTER TABLE merges ADD COLUMN reverts uuid;
