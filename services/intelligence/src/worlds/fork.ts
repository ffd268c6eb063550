import type { Queryable, SchemaReplica, WorldOrigin } from '@onto/shared';
import { bumpRevision } from '../engine/locks.js';
import { revalidateWorld } from '../engine/schema-changes.js';
import { recordAll } from '../merges/history.js';
import { announceRules } from '../rules/announce.js';

/**
 * Copies the base world's definitions — derived properties, rules, decision definitions, not
 * their values, alerts or decisions — into a fork, in the transaction that provisions it (docs/adr/0033).
 * A copy, not a reference: a world has at most MAX_DEFINITIONS_PER_WORLD of each kind, so it is
 * small whatever the base's size, and the two worlds' definitions then change apart. One
 * statement, so one snapshot of the base: a definition written in the base meanwhile is either
 * wholly in the copy or wholly not. The copies keep their names and versions (the ETags go on)
 * and say schema version 0: they are checked against the child's own schema (control's copy of
 * the base's at the fork) now if its replica has it, else when it arrives (storage.schema.updated).
 * The copies are the child's own history rows (docs/adr/0039), and the answer names the base's
 * definition position they were taken at — read in the same statement, so the same snapshot:
 * the fork's merge base in intelligence. The caller holds the child's world lock.
 */
export async function copyDefinitions(
  tx: Queryable,
  replica: SchemaReplica,
  worldId: string,
  from: WorldOrigin,
  topicPrefix: string,
): Promise<{ derived: number; rules: number; decisions: number; position: number }> {
  const { rows } = await tx.query<{ derived: number; rules: number; decisions: number; position: string }>(
    `WITH derived AS (
       INSERT INTO derived_definitions (world_id, name, object_type, expression, aggregates, max_staleness_ms,
                                        description, version, state, errors, schema_version, valid_since,
                                        created_at, updated_at)
       SELECT $2, name, object_type, expression, aggregates, max_staleness_ms, description, version, state, errors,
              0, valid_since, created_at, updated_at
         FROM derived_definitions WHERE world_id = $1
       ON CONFLICT (world_id, name) DO NOTHING RETURNING 1
     ), copied_rules AS (
       INSERT INTO rules (world_id, name, object_type, condition, alert_type, severity, description, version, state,
                          errors, schema_version, created_at, updated_at)
       SELECT $2, name, object_type, condition, alert_type, severity, description, version, state, errors, 0,
              created_at, updated_at
         FROM rules WHERE world_id = $1
       ON CONFLICT (world_id, name) DO NOTHING RETURNING 1
     ), decisions AS (
       INSERT INTO decision_definitions (world_id, name, rule, alert_type, action_type, parameters, approval,
                                         description, version, state, errors, schema_version, created_at, updated_at)
       SELECT $2, name, rule, alert_type, action_type, parameters, approval, description, version, state, errors, 0,
              created_at, updated_at
         FROM decision_definitions WHERE world_id = $1
       ON CONFLICT (world_id, name) DO NOTHING RETURNING 1
     )
     SELECT (SELECT count(*) FROM derived)::int AS derived, (SELECT count(*) FROM copied_rules)::int AS rules,
            (SELECT count(*) FROM decisions)::int AS decisions,
            (SELECT coalesce(max(seq), 0) FROM definition_history WHERE world_id = $1)::text AS position`,
    [from.world, worldId],
  );
  const row = rows[0] ?? { derived: 0, rules: 0, decisions: 0, position: '0' };
  const copied = { ...row, position: Number(row.position) };
  if (copied.derived + copied.rules + copied.decisions > 0) {
    await recordAll(tx, worldId);
    if (copied.rules > 0) await announceRules(tx, topicPrefix, worldId);
    // Checked against the child's schema if applied; revalidation also requests the evaluation over
    // the child's own objects (none, unless data took writes before this commit).
    if ((await replica.current(tx, worldId)).version > 0) await revalidateWorld(tx, replica, worldId);
    await bumpRevision(tx, worldId);
  }
  return copied;
}
