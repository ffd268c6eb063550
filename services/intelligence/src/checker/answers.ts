import { newEvent, Outbox, outboxOldestAgeSeconds, type ReceivedEvent, TOPICS } from '@onto/shared';
import type pg from 'pg';
import { getDerived } from '../derived/repository.js';
import { requestRecompute } from '../engine/recompute-jobs.js';

/**
 * A derived property is stale when a recompute of it has waited longer than its maximum staleness,
 * or a value of it was computed from an older version of its object that changed longer ago than that.
 */
const STALE_DERIVED = `
  SELECT d.name FROM derived_definitions d
   WHERE d.world_id = $1 AND d.state = 'valid'
     AND (EXISTS (SELECT 1 FROM recompute_jobs j
                   WHERE j.world_id = d.world_id AND j.kind = 'derived' AND j.name = d.name
                     AND j.finished_at IS NULL
                     AND j.created_at < now() - d.max_staleness_ms * interval '1 millisecond')
       OR EXISTS (SELECT 1 FROM derived_values v
                    JOIN rm_objects o ON o.world_id = v.world_id AND o.type = v.object_type AND o.pk = v.pk
                   WHERE v.world_id = d.world_id AND v.name = d.name AND NOT o.deleted
                     AND v.source_version < o.version
                     AND o.updated_at < now() - d.max_staleness_ms * interval '1 millisecond'))
   ORDER BY d.name`;

/**
 * intelligence's side of the consistency checker (docs/adr/0032), on the intelligence-worlds
 * consumer: answers `check.requested` with `intelligence.check.reported` (schema version, data
 * watermark, live objects per type and links per link type in the read model, stale derived
 * properties, outbox age), and `derived.recompute.requested` by queueing a recompute due now, as
 * the admin route does (the recompute worker polls its jobs).
 */
export function checkerAnswers(topicPrefix: string) {
  return async (tx: pg.ClientBase, events: ReceivedEvent[]): Promise<void> => {
    for (const { event } of events) {
      const world = event.world_id;
      if (event.type === 'check.requested') {
        const { rows } = await tx.query<{
          schemaVersion: number;
          dataSeq: string;
          counts: Record<string, number> | null;
          links: Record<string, number> | null;
        }>(
          `SELECT (SELECT coalesce(max(version), 0) FROM schema_versions WHERE world_id = w.id) AS "schemaVersion",
                  coalesce((SELECT seq FROM data_watermarks WHERE world_id = w.id), 0)::text AS "dataSeq",
                  (SELECT json_object_agg(type, n) FROM (
                     SELECT type, count(*)::int AS n FROM rm_objects
                      WHERE world_id = w.id AND NOT deleted GROUP BY type) c) AS counts,
                  (SELECT json_object_agg(link_type, n) FROM (
                     SELECT link_type, count(*)::int AS n FROM rm_links
                      WHERE world_id = w.id AND NOT deleted GROUP BY link_type) c) AS links
             FROM worlds w WHERE w.id = $1`,
          [world],
        );
        const row = rows[0];
        if (!row) continue; // not provisioned here: the checker reports intelligence as unreported
        const stale = await tx.query<{ name: string }>(STALE_DERIVED, [world]);
        await new Outbox(tx, topicPrefix).add({
          event: newEvent({
            type: 'intelligence.check.reported',
            worldId: world,
            key: world,
            version: 0,
            producer: 'intelligence',
            producerSeq: 0,
            causedBy: event.event_id,
            payload: {
              checkId: String(event.payload.checkId),
              schemaVersion: row.schemaVersion,
              dataSeq: Number(row.dataSeq),
              counts: row.counts ?? {},
              links: row.links ?? {},
              staleDerived: stale.rows.map((r) => r.name),
              outboxOldestAgeSeconds: await outboxOldestAgeSeconds(tx),
            },
          }),
          key: TOPICS['onto.intelligence'].key({ worldId: world }),
        });
      } else if (event.type === 'derived.recompute.requested') {
        const found = await getDerived(tx, world, String(event.payload.name));
        // Deleted or made invalid since the check: nothing to recompute.
        if (found?.state !== 'valid') continue;
        await requestRecompute(tx, {
          worldId: world,
          kind: 'derived',
          name: found.name,
          definitionVersion: found.version,
          objectType: found.objectType,
          dueInMs: 0,
        });
      }
    }
  };
}
