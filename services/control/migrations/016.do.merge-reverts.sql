-- Reverts of merges (issue 32 item 4, docs/adr/0081): a revert is a merge of the target into
-- itself whose source is the target before the reverted merge and whose base is the target
-- right after it. `reverts` names the merge it undoes (NULL: an ordinary merge).
ALTER TABLE merges ADD COLUMN reverts uuid REFERENCES merges (id);
CREATE INDEX merges_reverts ON merges (reverts) WHERE reverts IS NOT NULL;
