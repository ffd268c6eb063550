import { HttpProblem, newEvent, Outbox, outboxOldestAgeSeconds, type ReceivedEvent, TOPICS } from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import type pg from 'pg';
import { announceObjects } from '../admin/routes.js';

/**
 * data's side of the consistency checker (docs/adr/0032), on the data-worlds consumer: answers
 * `check.requested` with `storage.check.reported` (its schema version, newest object write, live
 * objects per type, outbox age) in the consuming transaction, and `objects.recount.requested` by
 * re-announcing the type's objects as the admin recount does (object.announced, idempotent by version).
 */
export function checkerAnswers(app: FastifyInstance) {
  return async (tx: pg.ClientBase, events: ReceivedEvent[]): Promise<void> => {
    for (const { event } of events) {
      const world = event.world_id;
      if (event.type === 'check.requested') {
        const { rows } = await tx.query<{ schemaVersion: number; seq: string; counts: Record<string, number> | null }>(
          `SELECT (SELECT coalesce(max(version), 0) FROM schema_versions WHERE world_id = w.id) AS "schemaVersion",
                  (SELECT coalesce(max(seq), 0) FROM object_heads WHERE world_id = w.id)::text AS seq,
                  (SELECT json_object_agg(type, n) FROM (
                     SELECT type, count(*)::int AS n FROM object_heads
                      WHERE world_id = w.id AND NOT deleted GROUP BY type) c) AS counts
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
              outboxOldestAgeSeconds: await outboxOldestAgeSeconds(tx),
            },
          }),
          key: TOPICS['onto.storage'].key({ worldId: world }),
        });
      } else if (event.type === 'objects.recount.requested') {
        const type = String(event.payload.type);
        // No cause: intelligence-changes, which reads the announcements, never sees onto.worlds.
        const origin = { actor: 'consistency-checker', requestId: `checker:${event.payload.checkId}`, causedBy: null };
        try {
          const announced = await announceObjects(app, world, type, origin);
          app.log.info({ world, type, announced }, 'the checker asked for a recount: objects re-announced');
        } catch (err) {
          // The world or the type is gone since the check: nothing left to announce.
          if (!(err instanceof HttpProblem)) throw err;
          app.log.warn({ world, type, err }, 'a recount the checker asked for has nothing to announce');
        }
      }
    }
  };
}
