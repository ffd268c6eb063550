import { inTransaction, isEvent, newEvent, Outbox, type ReceivedEvent, TOPICS } from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type pg from 'pg';
import { recordingCheckReports } from '../checker/checker.js';
import { recordingPositions } from './consistency.js';
import { applyRuleReports } from './protection.js';
import { applyHorizons } from './retention.js';
import { PROVISIONERS } from './routes.js';
import { applyTagPositions } from './tags.js';

const REPORTS: Record<string, { service: string; kind: 'provisioned' | 'dropped' }> = {
  'world.provisioned': { service: 'data', kind: 'provisioned' },
  'world.dropped': { service: 'data', kind: 'dropped' },
  'intelligence.world.provisioned': { service: 'intelligence', kind: 'provisioned' },
  'intelligence.world.dropped': { service: 'intelligence', kind: 'dropped' },
};

/** Applies data's and intelligence's reports to the world lifecycle. */
export async function applyReports(tx: pg.ClientBase, events: ReceivedEvent[], topicPrefix: string): Promise<void> {
  for (const { event } of events) {
    if (isEvent(event, 'world.provision.failed')) {
      const { field, reason } = event.payload;
      await failProvisioning(
        tx,
        event.world_id,
        { field: field ?? null, reason: reason ?? `${event.producer} could not provision the world` },
        topicPrefix,
      );
      continue;
    }
    const report = REPORTS[event.type];
    if (!report) continue;
    const column = report.kind === 'provisioned' ? 'confirmed_by' : 'dropped_by';
    // A report moves the world on only from the state that was waiting for it; a late one
    // (after FAILED, say) is recorded and changes nothing else.
    await tx.query(
      `UPDATE worlds SET ${column} = (SELECT array_agg(DISTINCT s ORDER BY s) FROM unnest(${column} || $2::text) s),
              updated_at = now()
        WHERE id = $1`,
      [event.world_id, report.service],
    );
    if (isEvent(event, 'world.provisioned') && event.payload.base) {
      await tx.query('UPDATE worlds SET parent_commit = $2 WHERE id = $1', [event.world_id, event.payload.base.commit]);
    }
    // intelligence's fork position: the merge base's definitions (docs/adr/0037).
    if (isEvent(event, 'intelligence.world.provisioned') && event.payload.base) {
      await tx.query('UPDATE worlds SET parent_definitions = $2 WHERE id = $1', [
        event.world_id,
        event.payload.base.definitions,
      ]);
    }
    await tx.query(
      `UPDATE worlds SET status = CASE WHEN status = 'PROVISIONING' THEN 'READY' ELSE 'DELETED' END,
              deadline_at = NULL, updated_at = now()
        WHERE id = $1
          AND ((status = 'PROVISIONING' AND confirmed_by @> $2::text[])
            OR (status = 'DELETING' AND dropped_by @> $2::text[]))`,
      [event.world_id, PROVISIONERS],
    );
  }
}

/**
 * A provisioner cannot make the world (data cannot resolve a fork's ref): it is FAILED at once
 * with the reason, and those that did provision it drop it, as after a timeout. Only a world still
 * PROVISIONING fails; a late report changes nothing.
 */
async function failProvisioning(
  tx: pg.ClientBase,
  worldId: string,
  failure: { field: string | null; reason: string },
  topicPrefix: string,
): Promise<void> {
  const { rows } = await tx.query<{ confirmed_by: string[] }>(
    `UPDATE worlds SET status = 'FAILED', updated_at = now(), deadline_at = NULL, failure = $2, failure_field = $3
      WHERE id = $1 AND status = 'PROVISIONING'
     RETURNING confirmed_by`,
    [worldId, failure.reason, failure.field],
  );
  const failed = rows[0];
  if (failed) await requestDrop(tx, worldId, failure.reason, failed.confirmed_by, topicPrefix);
}

async function requestDrop(
  tx: pg.ClientBase,
  worldId: string,
  reason: string,
  provisioned: string[],
  topicPrefix: string,
): Promise<void> {
  const event = newEvent({
    type: 'world.drop.requested',
    worldId,
    key: worldId,
    version: 0,
    producer: 'control',
    producerSeq: 0,
    payload: { reason, provisioned },
  });
  await new Outbox(tx, topicPrefix).add({ event, key: TOPICS['onto.worlds'].key({ worldId }) });
}

/**
 * Worlds still PROVISIONING past their deadline become FAILED, and every provisioner is told to
 * drop what it may have made (compensation), in one transaction.
 */
export async function failOverdue(pool: pg.Pool, topicPrefix: string): Promise<string[]> {
  return inTransaction(pool, async (tx) => {
    const { rows } = await tx.query<{ id: string; confirmed_by: string[] }>(
      `UPDATE worlds SET status = 'FAILED', updated_at = now(), deadline_at = NULL,
              failure = 'provisioning timed out waiting for ' ||
                (SELECT string_agg(p, ', ') FROM unnest($1::text[]) p WHERE NOT p = ANY(confirmed_by))
        WHERE status = 'PROVISIONING' AND deadline_at < now()
       RETURNING id, confirmed_by`,
      [PROVISIONERS],
    );
    for (const row of rows) await requestDrop(tx, row.id, 'provisioning timed out', row.confirmed_by, topicPrefix);
    return rows.map((r) => r.id);
  });
}

export default fp(
  async (app: FastifyInstance) => {
    app.addConsumer({
      name: 'control-worlds',
      topics: ['onto.storage', 'onto.intelligence'],
      apply: async (tx, events) => {
        await applyReports(tx, events, app.topicPrefix);
        await applyTagPositions(tx, events);
        await applyRuleReports(tx, events);
        await applyHorizons(tx, events);
        // The same reports carry data's and intelligence's positions for the version vector.
        const positions = recordingPositions(events);
        if (positions) await tx.query(positions.text, [...(positions.values ?? [])]);
        const reports = recordingCheckReports(events);
        if (reports) await tx.query(reports.text, [...(reports.values ?? [])]);
      },
    });
    app.jobs.every('control.provisioning-deadlines', 500, async () => {
      const failed = await failOverdue(app.pg, app.topicPrefix);
      if (failed.length > 0) app.log.warn({ worlds: failed }, 'world provisioning timed out; compensating');
    });
  },
  { name: 'onto-control-world-saga', dependencies: ['onto-consumers', 'onto-jobs'] },
);
