import { newEvent, Outbox, type Queryable, TOPICS } from '@onto/shared';

/**
 * `intelligence.rules.changed`: the names of a world's rules now, with its definition position,
 * enqueued in the transaction that changed them (a PUT, a DELETE, a merge's writes, a fork's
 * copy). Control checks a protection's requiredChecks against the latest (docs/adr/0058).
 */
export async function announceRules(tx: Queryable, topicPrefix: string, worldId: string): Promise<void> {
  const { rows } = await tx.query<{ rules: string[]; definitions: string }>(
    `SELECT coalesce((SELECT array_agg(name ORDER BY name) FROM rules WHERE world_id = $1), '{}') AS rules,
            coalesce((SELECT max(seq) FROM definition_history WHERE world_id = $1), 0)::text AS definitions`,
    [worldId],
  );
  const row = rows[0];
  const event = newEvent({
    type: 'intelligence.rules.changed',
    worldId,
    key: worldId,
    version: 0,
    producer: 'intelligence',
    producerSeq: 0,
    payload: { rules: row?.rules ?? [], definitions: Number(row?.definitions ?? 0) },
  });
  await new Outbox(tx, topicPrefix).add({ event, key: TOPICS['onto.intelligence'].key({ worldId }) });
}
