import type { Queryable } from '@onto/shared';
import { type DefinitionWrite, definitionTable } from '../definitions.js';
import type { Rule, RuleInput } from './model.js';

const COLUMNS = `world_id AS "worldId", name, object_type AS "objectType", condition, alert_type AS "alertType",
  severity, description, version, state, errors, schema_version AS "schemaVersion",
  to_json(created_at)#>>'{}' AS "createdAt", to_json(updated_at)#>>'{}' AS "updatedAt"`;

type Row = Omit<Rule, 'description'> & { description: string | null };
const fromRow = ({ description, ...rest }: Row): Rule => ({
  ...rest,
  ...(description === null ? {} : { description }),
});

/** The rules at a position (see derived/repository.ts AS_OF). */
const AS_OF = `SELECT $1::text AS world_id, a.name, a.body->>'objectType' AS object_type, a.body->>'condition' AS condition,
         a.body->>'alertType' AS alert_type, a.body->>'severity' AS severity, a.body->>'description' AS description,
         a.version, coalesce(r.state, 'valid') AS state, coalesce(r.errors, '[]') AS errors,
         coalesce(r.schema_version, 0) AS schema_version, coalesce(r.created_at, a.created) AS created_at,
         coalesce(r.updated_at, a.written_at) AS updated_at
    FROM definitions_at($1, $2) a
    LEFT JOIN rules r
      ON r.world_id = $1 AND r.name = a.name AND r.version = a.version
     AND jsonb_strip_nulls(jsonb_build_object('objectType', r.object_type, 'condition', r.condition,
           'alertType', r.alert_type, 'severity', r.severity, 'description', r.description)) = a.body
   WHERE a.kind = 'rule'`;
const table = definitionTable('rules', COLUMNS, fromRow, AS_OF);
export const listRules = table.list;
export const getRule = table.get;
export const listRulesAt = table.listAt;
export const getRuleAt = table.getAt;
export const deleteRule = table.remove;

export interface RuleWrite extends RuleInput, DefinitionWrite {}

export async function saveRule(tx: Queryable, w: RuleWrite): Promise<Rule> {
  const { rows } = await tx.query<Row>(
    `INSERT INTO rules (world_id, name, object_type, condition, alert_type, severity, description, version, state,
                        errors, schema_version)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb, $11)
     ON CONFLICT (world_id, name) DO UPDATE
       SET object_type = EXCLUDED.object_type, condition = EXCLUDED.condition, alert_type = EXCLUDED.alert_type,
           severity = EXCLUDED.severity, description = EXCLUDED.description, version = EXCLUDED.version,
           state = EXCLUDED.state, errors = EXCLUDED.errors, schema_version = EXCLUDED.schema_version,
           updated_at = now()
     RETURNING ${COLUMNS}`,
    [
      w.worldId,
      w.name,
      w.objectType,
      w.condition,
      w.alertType,
      w.severity,
      w.description ?? null,
      w.version,
      w.state,
      JSON.stringify(w.errors),
      w.schemaVersion,
    ],
  );
  return table.saved(rows, 'rule');
}
