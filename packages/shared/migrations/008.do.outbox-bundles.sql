-- A bundle is one outbox row that carries many events of one lane whose bodies share a template
-- (bulk writes); `bundle` is how many. Its body is the template's parts as a JSON array on the
-- first line, then one line per event: event id, partition key and the values that fill the
-- template, tab-separated (keys are percent-encoded and values are JSON text, so none holds a tab
-- or a newline). An event's body is parts[0] value[0] parts[1] … value[n-1] parts[n]. A plain row
-- has `bundle` NULL and its event in `body`, as before. The relay publishes a bundle's events as
-- separate records, in their order, with the row's headers; the lane keeps every key's order
-- because all of a bundle's keys belong to its lane (docs/adr/0016).
ALTER TABLE outbox ADD COLUMN bundle integer CHECK (bundle > 0);

-- Bundles are large (tens of kB): lz4 compresses them several times over at a fraction of
-- pglz's cost. A server built without lz4 keeps the default.
DO $$
BEGIN
  ALTER TABLE outbox ALTER COLUMN body SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported OR invalid_parameter_value THEN
  RAISE NOTICE 'lz4 is not available: outbox bodies keep the default compression';
END $$;

-- Every event of the outbox, bundles expanded, with the body the relay publishes: for operators
-- and tests.
CREATE VIEW outbox_events AS
  SELECT id, event_id, topic, partition_key, lane, body, headers, created_at
    FROM outbox WHERE bundle IS NULL
  UNION ALL
  SELECT o.id, split_part(e.line, E'\t', 1)::uuid, o.topic, split_part(e.line, E'\t', 2), o.lane,
         (SELECT string_agg(p.part || CASE WHEN p.i < t.n THEN split_part(e.line, E'\t', p.i::int + 2) ELSE '' END,
                            '' ORDER BY p.i)
            FROM jsonb_array_elements_text(t.parts) WITH ORDINALITY AS p(part, i)),
         o.headers, o.created_at
    FROM outbox o
   CROSS JOIN LATERAL (SELECT split_part(o.body, E'\n', 1)::jsonb AS parts) t0
   CROSS JOIN LATERAL (SELECT t0.parts, jsonb_array_length(t0.parts) AS n) t
   CROSS JOIN LATERAL string_to_table(substr(o.body, strpos(o.body, E'\n') + 1), E'\n') AS e(line)
   WHERE o.bundle IS NOT NULL;
