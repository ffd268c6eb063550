import { isEvent, type ReceivedEvent, type TagRequest, type WorldOrigin, worldProvisioning } from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type pg from 'pg';
import { checkerAnswers } from '../checker/answers.js';
import { lockWorlds } from '../engine/locks.js';
import { copyDefinitions } from './fork.js';

/**
 * intelligence's part of a tag's vector (docs/adr/0029): its watermark and schema version in the
 * world now. The tag is kept too (docs/adr/0045, 0046), with the world's definition position and
 * intelligence's moment now — the caller holds the world's lock — for `?at=<tag>` and for forks at
 * its commit; data's reply fills in the commit (engine/schema-changes.ts), in either order.
 */
async function tagPosition(
  tx: pg.ClientBase,
  worldId: string,
  { tag, request }: TagRequest,
): Promise<{ dataSeq: number; schemaVersion: number }> {
  await tx.query(
    `INSERT INTO world_tags (world_id, name, request_id, definitions, moment)
     VALUES ($1, $2, $3, (SELECT coalesce(max(seq), 0) FROM definition_history WHERE world_id = $1),
             (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM intelligence_seq))
     ON CONFLICT (world_id, name) DO UPDATE
       SET request_id = EXCLUDED.request_id, definitions = EXCLUDED.definitions, moment = EXCLUDED.moment,
           requested_at = now(),
           commit = CASE WHEN world_tags.request_id = EXCLUDED.request_id THEN world_tags.commit END,
           written = CASE WHEN world_tags.request_id = EXCLUDED.request_id THEN world_tags.written END,
           deleted = world_tags.deleted AND world_tags.request_id = EXCLUDED.request_id
     WHERE world_tags.request_id <= EXCLUDED.request_id`,
    [worldId, tag, request],
  );
  const { rows } = await tx.query<{ dataSeq: string; schemaVersion: number }>(
    `SELECT coalesce((SELECT seq FROM data_watermarks WHERE world_id = $1), 0)::text AS "dataSeq",
            (SELECT coalesce(max(version), 0) FROM schema_versions WHERE world_id = $1) AS "schemaVersion"`,
    [worldId],
  );
  return { dataSeq: Number(rows[0]?.dataSeq ?? 0), schemaVersion: Number(rows[0]?.schemaVersion ?? 0) };
}

/**
 * `world.protection.updated` (docs/adr/0058): kept with the world; only a greater revision
 * replaces it, so a redelivered older one changes nothing.
 */
async function applyProtection(tx: pg.ClientBase, events: ReceivedEvent[]): Promise<void> {
  for (const { event } of events) {
    if (!isEvent(event, 'world.protection.updated')) continue;
    const p = event.payload;
    await tx.query(
      `UPDATE worlds SET require_merge = $2, allow_actions = $3, required_approvals = $4, required_checks = $5,
                         protection_revision = $6
        WHERE id = $1 AND protection_revision < $6`,
      [event.world_id, p.requireMerge, p.allowActions, p.requiredApprovals, p.requiredChecks, p.revision],
    );
  }
}

/** This service's side of the world lifecycle saga (see worldProvisioning); a fork starts with its base's definitions. */
export default fp(
  async (app: FastifyInstance) => {
    const provisioning = worldProvisioning('intelligence', app.topicPrefix, {
      provision: async (tx, worldId, from) => {
        if (!from) return undefined;
        const { position } = await copyDefinitions(tx, app.schemaReplica, worldId, from, app.topicPrefix);
        // Where the fork starts in intelligence: control records it as the fork's merge base (docs/adr/0037).
        return { reply: { base: { world: from.world, definitions: position } } };
      },
      position: tagPosition,
      // A deleted tag no longer resolves; the row stays (deleted) as the anchor it was for forks
      // (docs/adr/0045), and so that data's reply, applied by the other consumer, cannot revive it.
      untag: async (tx, worldId, { tag, request }) => {
        await tx.query(
          `INSERT INTO world_tags (world_id, name, request_id, deleted) VALUES ($1, $2, $3, true)
           ON CONFLICT (world_id, name) DO UPDATE SET deleted = true WHERE world_tags.request_id = EXCLUDED.request_id`,
          [worldId, tag, request],
        );
      },
    });
    const answerChecker = checkerAnswers(app.topicPrefix);
    app.addConsumer({
      name: 'intelligence-worlds',
      topics: ['onto.worlds'],
      apply: async (tx, events) => {
        // The forks of the batch and their bases locked at once, in the one order all lockers use
        // (see lockWorlds): a base's definitions and alerts hold still while its fork point is read.
        // A tagged world is locked too: its definition position and moment are read for the tag.
        const forks = events.filter(
          (e) => e.event.type === 'world.created' && (e.event.payload.from as WorldOrigin | null),
        );
        await lockWorlds(tx, [
          ...forks.flatMap((e) => [e.event.world_id, (e.event.payload.from as WorldOrigin).world]),
          ...events.filter((e) => e.event.type === 'world.tag.requested').map((e) => e.event.world_id),
        ]);
        await provisioning(tx, events);
        await applyProtection(tx, events);
        await answerChecker(tx, events);
      },
    });
  },
  { name: 'onto-intelligence-worlds', dependencies: ['onto-consumers'] },
);
