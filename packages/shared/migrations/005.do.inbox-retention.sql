-- The inbox is pruned by event id (UUIDv7, so time-ordered) through its primary key, not by
-- processed_at: the processed_at index was one more index entry written per event, and nothing
-- read it. processed_at stays, as a second condition on the rows pruned (see pruneInbox).
DROP INDEX inbox_processed_at;
