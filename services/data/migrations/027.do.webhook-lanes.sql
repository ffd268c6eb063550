-- A webhook delivery names the delivery of its lane enqueued just before it (docs/adr/0082): the
-- claim then checks one primary-key row, where it used to look for any older pending row of the
-- lane. That search went through partial indexes on state = 'pending', which a queue's statistics
-- (taken while nothing was pending) make look empty: the planner scanned the whole backlog once
-- per candidate, and 2,000 queued deliveries took 0.9 s a claim.
ALTER TABLE webhook_deliveries ADD COLUMN after_id bigint;
DROP INDEX webhook_deliveries_lane;
-- The lane's newest delivery, whatever its state: a new one is enqueued behind it.
CREATE INDEX webhook_deliveries_lane ON webhook_deliveries (world_id, webhook, ordering_key, id);
-- Deliveries pending now, behind the one before them in their lane when it is pending too.
UPDATE webhook_deliveries d
   SET after_id = (SELECT e.id FROM webhook_deliveries e
                    WHERE e.world_id = d.world_id AND e.webhook = d.webhook AND e.ordering_key = d.ordering_key
                      AND e.id < d.id ORDER BY e.id DESC LIMIT 1)
 WHERE d.state = 'pending';
