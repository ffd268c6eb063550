import { HttpProblem, newEvent, Outbox, outboxOldestAgeSeconds, type ReceivedEvent, TOPICS } from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import type pg from 'pg';
import { announceLinks, announceObjects } from './announce.js';

/**
 * data's side of the consistency checker (docs/adr/0032), on the data-worlds consumer: answers
 * `check.requested` with `storage.check.reported` (its schema version, newest object and link
 * writes, live objects per type and links per link type, outbox age) in the consuming transaction,
 * and `objects.recount.requested` / `links.recount.requested` by re-announcing the type's objects
 * or links as the admin recounts do (object.announced / link.announced, idempotent by version).
 */
export function checkerAnswers(app: FastifyInstance) {
  return async (tx: pg.ClientBase, events: ReceivedEvent[]): Promise<void> => {
    for (const { event } of events) {
      const world = event.world_id;
      if (event.type === 'check.requested') {
        const { rows } = await tx.query<{
          schemaVersion: number;
          seq: string;
          linkSeq: string;
          counts: Record<string, number> | null;
          links: Record<string, number> | null;
        }>(
          `SELECT (SELECT coalesce(max(version), 0) FROM schema_versions WHERE world_id = w.id) AS "schemaVersion",
                  (SELECT coalesce(max(seq), 0) FROM object_heads WHERE world_id = w.id)::text AS seq,
                  (SELECT coalesce(max(seq), 0) FROM link_heads WHERE world_id = w.id)::text AS "linkSeq",
                  (SELECT json_object_agg(type, n) FROM (
                     SELECT type, count(*)::int AS n FROM object_heads
                      WHERE world_id = w.id AND NOT deleted GROUP BY type) c) AS counts,
                  (SELECT json_object_agg(link_type, n) FROM (
                     SELECT link_type, count(*)::int AS n FROM link_heads
                      WHERE world_id = w.id AND NOT deleted GROUP BY link_type) c) AS links
             FROM worlds w WHERE w.id = $1`,
          [world],
        );
        const row = rows[0];
        if (!row) continue; // not provisioned here: the checker reports data as unreported
        await new Outbox(tx, app.topicPrefix).add({
          event: newEvent({
            type: 'storage.check.reported',
            worldId: world,
            key: world,
            version: 0,
            producer: 'data',
            producerSeq: 0,
            causedBy: event.event_id,
            payload: {
              checkId: String(event.payload.checkId),
              schemaVersion: row.schemaVersion,
              seq: Number(row.seq),
              counts: row.counts ?? {},
              linkSeq: Number(row.linkSeq),
              links: row.links ?? {},
              outboxOldestAgeSeconds: await outboxOldestAgeSeconds(tx),
            },
          }),
          key: TOPICS['onto.storage'].key({ worldId: world }),
        });
      } else if (event.type === 'objects.recount.requested' || event.type === 'links.recount.requested') {
        const type = String(event.payload.type);
        // No cause: intelligence-changes, which reads the announcements, never sees onto.worlds.
        const origin = { actor: 'consistency-checker', requestId: `checker:${event.payload.checkId}`, causedBy: null };
        const links = event.type === 'links.recount.requested';
        try {
          const announced = await (links ? announceLinks : announceObjects)(app, world, type, origin);
          app.log.info(
            { world, type, announced },
            `the checker asked for a recount: ${links ? 'links' : 'objects'} re-announced`,
          );
        } catch (err) {
          // The world or the type is gone since the check: nothing left to announce.
          if (!(err instanceof HttpProblem)) throw err;
          app.log.warn({ world, type, err }, 'a recount the checker asked for has nothing to announce');
        }
      }
    }
  };
}
