import type { Queryable, SchemaReplica, WorldOrigin } from '@onto/shared';
import { bumpRevision } from '../engine/locks.js';
import { revalidateWorld } from '../engine/schema-changes.js';
import { recordAll } from '../merges/history.js';
import { announceRules } from '../rules/announce.js';
import { FORK_POINT } from './ref.js';

/** What a fork took from its base: counts of the definitions copied, and where in the base it started. */
export interface Copied {
  derived: number;
  rules: number;
  decisions: number;
  /** The base's definition position the copy is (docs/adr/0039): the fork's merge base in intelligence. */
  position: number;
}

/** How long a fork at a commit waits for the commit of a base's tag data has not reported yet. */
const PENDING_TAG_WAIT = '60 seconds';

/**
 * A fork at a tag arrives as the tag's commit, and the tag is its anchor only once data's reply
 * has reached this service's other consumer (control saw it first: the tag is COMPLETE). While a
 * tag of the base requested recently has no commit here, the provisioning fails and is retried
 * (the consumer's backoff); a tag data never answers stops counting after PENDING_TAG_WAIT.
 */
async function awaitTagCommits(tx: Queryable, base: string): Promise<void> {
  const { rows } = await tx.query<{ name: string }>(
    `SELECT name FROM world_tags
      WHERE world_id = $1 AND commit IS NULL AND definitions IS NOT NULL
        AND requested_at > now() - interval '${PENDING_TAG_WAIT}' LIMIT 1`,
    [base],
  );
  if (rows[0]) {
    throw new Error(`tag ${rows[0].name} of ${base} has no commit here yet: the fork's point waits for data's reply`);
  }
}

/**
 * Copies the base world's definitions as they were at the fork point — derived properties, rules,
 * decision definitions, not their values, alerts or decisions — into a fork, in the transaction
 * that provisions it (docs/adr/0033, 0045). The definitions come from the base's history
 * (docs/adr/0039): those it had at the fork point, including ones deleted since, and none it
 * made after. A definition the base still has at the same version and body is copied with its
 * state and valid_since (so the values the fork inherits stay current); an older version is
 * rebuilt from its history body and is valid from the instant it was written. One statement, so
 * one snapshot of the base. The copies keep their names and versions (the ETags go on) and say
 * schema version 0: they are checked against the child's own schema now if its replica has it,
 * else when it arrives (storage.schema.updated). They are the child's own history rows, and the
 * fork point is recorded in `fork_points`: the position copied (the fork's merge base) and the
 * moment (intelligence_seq) that bounds the base's alerts the fork inherits. The caller holds
 * the locks of the child and of the base (so the base's alerts and definitions are still).
 */
export async function copyDefinitions(
  tx: Queryable,
  replica: SchemaReplica,
  worldId: string,
  from: WorldOrigin,
  topicPrefix: string,
): Promise<Copied> {
  if (from.ref?.commit !== undefined) await awaitTagCommits(tx, from.world);
  const { rows } = await tx.query<{ derived: number; rules: number; decisions: number; position: string }>(
    `WITH ${FORK_POINT},
     at AS (
       SELECT DISTINCT ON (h.kind, h.name) h.kind, h.name, h.version, h.body, h.written_at,
              (SELECT min(f.written_at) FROM definition_history f
                WHERE f.world_id = $1 AND f.kind = h.kind AND f.name = h.name) AS created
         FROM definition_history h, point WHERE h.world_id = $1 AND h.seq <= point.p
        ORDER BY h.kind, h.name, h.seq DESC
     ), live AS (SELECT * FROM at WHERE body IS NOT NULL),
     derived AS (
       INSERT INTO derived_definitions (world_id, name, object_type, expression, aggregates, max_staleness_ms,
                                        description, version, state, errors, schema_version, valid_since,
                                        created_at, updated_at)
       SELECT $2, a.name, a.body->>'objectType', a.body->>'expression', coalesce(a.body->'aggregates', '{}'),
              (a.body->>'maxStalenessMs')::int, a.body->>'description', a.version,
              coalesce(d.state, 'valid'), coalesce(d.errors, '[]'), 0, coalesce(d.valid_since, a.written_at),
              coalesce(d.created_at, a.created), coalesce(d.updated_at, a.written_at)
         FROM live a
         LEFT JOIN derived_definitions d
           ON d.world_id = $1 AND d.name = a.name AND d.version = a.version
          AND jsonb_strip_nulls(jsonb_build_object('objectType', d.object_type, 'expression', d.expression,
                'aggregates', d.aggregates, 'maxStalenessMs', d.max_staleness_ms, 'description', d.description)) = a.body
        WHERE a.kind = 'derived'
       ON CONFLICT (world_id, name) DO NOTHING RETURNING 1
     ), copied_rules AS (
       INSERT INTO rules (world_id, name, object_type, condition, alert_type, severity, description, version, state,
                          errors, schema_version, created_at, updated_at)
       SELECT $2, a.name, a.body->>'objectType', a.body->>'condition', a.body->>'alertType', a.body->>'severity',
              a.body->>'description', a.version, coalesce(r.state, 'valid'), coalesce(r.errors, '[]'), 0,
              coalesce(r.created_at, a.created), coalesce(r.updated_at, a.written_at)
         FROM live a
         LEFT JOIN rules r
           ON r.world_id = $1 AND r.name = a.name AND r.version = a.version
          AND jsonb_strip_nulls(jsonb_build_object('objectType', r.object_type, 'condition', r.condition,
                'alertType', r.alert_type, 'severity', r.severity, 'description', r.description)) = a.body
        WHERE a.kind = 'rule'
       ON CONFLICT (world_id, name) DO NOTHING RETURNING 1
     ), decisions AS (
       INSERT INTO decision_definitions (world_id, name, rule, alert_type, action_type, parameters, approval,
                                         description, version, state, errors, schema_version, created_at, updated_at)
       SELECT $2, a.name, a.body->>'rule', a.body->>'alertType', a.body->>'actionType', a.body->'parameters',
              a.body->>'approval', a.body->>'description', a.version, coalesce(x.state, 'valid'),
              coalesce(x.errors, '[]'), 0, coalesce(x.created_at, a.created), coalesce(x.updated_at, a.written_at)
         FROM live a
         LEFT JOIN decision_definitions x
           ON x.world_id = $1 AND x.name = a.name AND x.version = a.version
          AND jsonb_strip_nulls(jsonb_build_object('rule', x.rule, 'alertType', x.alert_type,
                'actionType', x.action_type, 'parameters', x.parameters, 'approval', x.approval,
                'description', x.description)) = a.body
        WHERE a.kind = 'decision'
       ON CONFLICT (world_id, name) DO NOTHING RETURNING 1
     ), fork_point AS (
       INSERT INTO fork_points (world_id, base_world, definitions, moment)
       SELECT $2, $1, point.p, point.moment FROM point
       ON CONFLICT (world_id) DO NOTHING
     )
     SELECT (SELECT count(*) FROM derived)::int AS derived, (SELECT count(*) FROM copied_rules)::int AS rules,
            (SELECT count(*) FROM decisions)::int AS decisions, (SELECT p FROM point)::text AS position`,
    [from.world, worldId, from.ref?.commit ?? null, from.ref?.instant ?? null],
  );
  const row = rows[0] ?? { derived: 0, rules: 0, decisions: 0, position: '0' };
  // A world.created sent again answers the point recorded the first time.
  const recorded = await tx.query<{ definitions: string }>(
    'SELECT definitions::text FROM fork_points WHERE world_id = $1',
    [worldId],
  );
  const copied = { ...row, position: Number(recorded.rows[0]?.definitions ?? row.position) };
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
