import type { Queryable } from '@onto/shared';
import { type DefinitionWrite, definitionTable } from '../definitions.js';
import type { DecisionDefinition, DecisionInput } from './model.js';

const COLUMNS = `world_id AS "worldId", name, rule, alert_type AS "alertType", action_type AS "actionType",
  parameters, approval, description, version, state, errors, schema_version AS "schemaVersion",
  to_json(created_at)#>>'{}' AS "createdAt", to_json(updated_at)#>>'{}' AS "updatedAt"`;

type Row = Omit<DecisionDefinition, 'description' | 'rule' | 'alertType'> & {
  description: string | null;
  rule: string | null;
  alertType: string | null;
};
const fromRow = ({ description, rule, alertType, ...rest }: Row): DecisionDefinition => ({
  ...rest,
  ...(rule === null ? {} : { rule }),
  ...(alertType === null ? {} : { alertType }),
  ...(description === null ? {} : { description }),
});

/** The decision definitions at a position (see derived/repository.ts AS_OF). */
const AS_OF = `SELECT $1::text AS world_id, a.name, a.body->>'rule' AS rule, a.body->>'alertType' AS alert_type,
         a.body->>'actionType' AS action_type, a.body->'parameters' AS parameters, a.body->>'approval' AS approval,
         a.body->>'description' AS description, a.version, coalesce(x.state, 'valid') AS state,
         coalesce(x.errors, '[]') AS errors, coalesce(x.schema_version, 0) AS schema_version,
         coalesce(x.created_at, a.created) AS created_at, coalesce(x.updated_at, a.written_at) AS updated_at
    FROM definitions_at($1, $2) a
    LEFT JOIN decision_definitions x
      ON x.world_id = $1 AND x.name = a.name AND x.version = a.version
     AND jsonb_strip_nulls(jsonb_build_object('rule', x.rule, 'alertType', x.alert_type,
           'actionType', x.action_type, 'parameters', x.parameters, 'approval', x.approval,
           'description', x.description)) = a.body
   WHERE a.kind = 'decision'`;
const table = definitionTable('decision_definitions', COLUMNS, fromRow, AS_OF);
export const listDecisionDefinitions = table.list;
export const getDecisionDefinition = table.get;
export const listDecisionDefinitionsAt = table.listAt;
export const getDecisionDefinitionAt = table.getAt;
export const deleteDecisionDefinition = table.remove;

export interface DecisionDefinitionWrite extends DecisionInput, DefinitionWrite {}

export async function saveDecisionDefinition(tx: Queryable, w: DecisionDefinitionWrite) {
  const { rows } = await tx.query<Row>(
    `INSERT INTO decision_definitions (world_id, name, rule, alert_type, action_type, parameters, approval,
                                       description, version, state, errors, schema_version)
     VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9, $10, $11::jsonb, $12)
     ON CONFLICT (world_id, name) DO UPDATE
       SET rule = EXCLUDED.rule, alert_type = EXCLUDED.alert_type, action_type = EXCLUDED.action_type,
           parameters = EXCLUDED.parameters, approval = EXCLUDED.approval, description = EXCLUDED.description,
           version = EXCLUDED.version, state = EXCLUDED.state, errors = EXCLUDED.errors,
           schema_version = EXCLUDED.schema_version, updated_at = now()
     RETURNING ${COLUMNS}`,
    [
      w.worldId,
      w.name,
      w.rule ?? null,
      w.alertType ?? null,
      w.actionType,
      JSON.stringify(w.parameters),
      w.approval,
      w.description ?? null,
      w.version,
      w.state,
      JSON.stringify(w.errors),
      w.schemaVersion,
    ],
  );
  return table.saved(rows, 'decision definition');
}
