import type { Queryable } from '@onto/shared';
import { type DefinitionWrite, definitionTable } from '../definitions.js';
import type { DerivedDefinition, DerivedInput } from './model.js';

const COLUMNS = `world_id AS "worldId", name, object_type AS "objectType", expression, aggregates,
  max_staleness_ms AS "maxStalenessMs", description, version, state, errors, schema_version AS "schemaVersion",
  to_json(valid_since)#>>'{}' AS "validSince", to_json(created_at)#>>'{}' AS "createdAt",
  to_json(updated_at)#>>'{}' AS "updatedAt"`;

type Row = Omit<DerivedDefinition, 'description'> & { description: string | null };
const fromRow = ({ description, ...rest }: Row): DerivedDefinition => ({
  ...rest,
  ...(description === null ? {} : { description }),
});

/**
 * The definitions at a position: a version the world still has (same version and body) keeps its
 * state and times, an older one is valid since it was written (as a fork's copy, worlds/fork.ts).
 */
const AS_OF = `SELECT $1::text AS world_id, a.name, a.body->>'objectType' AS object_type, a.body->>'expression' AS expression,
         coalesce(a.body->'aggregates', '{}') AS aggregates, (a.body->>'maxStalenessMs')::int AS max_staleness_ms,
         a.body->>'description' AS description, a.version, coalesce(d.state, 'valid') AS state,
         coalesce(d.errors, '[]') AS errors, coalesce(d.schema_version, 0) AS schema_version,
         coalesce(d.valid_since, a.written_at) AS valid_since, coalesce(d.created_at, a.created) AS created_at,
         coalesce(d.updated_at, a.written_at) AS updated_at
    FROM definitions_at($1, $2) a
    LEFT JOIN derived_definitions d
      ON d.world_id = $1 AND d.name = a.name AND d.version = a.version
     AND jsonb_strip_nulls(jsonb_build_object('objectType', d.object_type, 'expression', d.expression,
           'aggregates', d.aggregates, 'maxStalenessMs', d.max_staleness_ms, 'description', d.description)) = a.body
   WHERE a.kind = 'derived'`;
const table = definitionTable('derived_definitions', COLUMNS, fromRow, AS_OF);
export const listDerived = table.list;
export const getDerived = table.get;
export const listDerivedAt = table.listAt;
export const getDerivedAt = table.getAt;

export interface DerivedWrite extends DerivedInput, DefinitionWrite {
  /** The values computed before now become stale (clock time: after this transaction took the world's lock). */
  invalidateValues: boolean;
}

export async function saveDerived(tx: Queryable, w: DerivedWrite): Promise<DerivedDefinition> {
  const { rows } = await tx.query<Row>(
    `INSERT INTO derived_definitions AS d (world_id, name, object_type, expression, aggregates, max_staleness_ms,
                                     description, version, state, errors, schema_version, valid_since)
     VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9, $10::jsonb, $11, clock_timestamp())
     ON CONFLICT (world_id, name) DO UPDATE
       SET object_type = EXCLUDED.object_type, expression = EXCLUDED.expression, aggregates = EXCLUDED.aggregates,
           max_staleness_ms = EXCLUDED.max_staleness_ms, description = EXCLUDED.description,
           version = EXCLUDED.version, state = EXCLUDED.state, errors = EXCLUDED.errors,
           schema_version = EXCLUDED.schema_version, updated_at = now(),
           valid_since = CASE WHEN $12 THEN clock_timestamp() ELSE d.valid_since END
     RETURNING ${COLUMNS}`,
    [
      w.worldId,
      w.name,
      w.objectType,
      w.expression,
      JSON.stringify(w.aggregates),
      w.maxStalenessMs,
      w.description ?? null,
      w.version,
      w.state,
      JSON.stringify(w.errors),
      w.schemaVersion,
      w.invalidateValues,
    ],
  );
  return table.saved(rows, 'definition');
}

/**
 * Drops the values of derived property `name` from the world's current ones, keeping them in its
 * history valid up to and including the world's watermark: a fork whose definition computed them
 * still reads them there (docs/adr/0068).
 */
export async function retireValues(tx: Queryable, worldId: string, name: string): Promise<void> {
  await tx.query(
    `WITH gone AS (DELETE FROM derived_values WHERE world_id = $1 AND name = $2 RETURNING *)
     INSERT INTO derived_values_history (world_id, object_type, pk, name, value, value_kind, error, computed_at,
                                         definition_version, source_version, source_seq, sources, valid_seq,
                                         superseded_seq)
     SELECT world_id, object_type, pk, name, value, value_kind, error, computed_at, definition_version,
            source_version, source_seq, sources, valid_seq, greatest(rm_world_seq($1), valid_seq) + 1
       FROM gone`,
    [worldId, name],
  );
}

/** Removes a definition and its values (kept in the history, see retireValues). */
export async function deleteDerived(tx: Queryable, worldId: string, name: string): Promise<void> {
  await table.remove(tx, worldId, name);
  await retireValues(tx, worldId, name);
}

/** A stored derived value as the API shows it. */
export type StoredValue = {
  name: string;
  value: unknown;
  kind: string | null;
  error: { message: string } | null;
  computedAt: string;
  definitionVersion: number;
  sourceVersion: number;
  sourceSeq: number;
  sources: Record<string, unknown>;
  /** Computed by the current definition after everything it reads last changed shape. */
  current: boolean;
};

export async function valuesOf(db: Queryable, worldId: string, type: string, pk: string): Promise<StoredValue[]> {
  const { rows } = await db.query<StoredValue>(
    `SELECT v.name, v.value, v.value_kind AS kind, v.error, to_json(v.computed_at)#>>'{}' AS "computedAt",
            v.definition_version AS "definitionVersion", v.source_version::float8 AS "sourceVersion",
            v.source_seq::float8 AS "sourceSeq", v.sources,
            coalesce(d.state = 'valid' AND v.definition_version = d.version AND v.computed_at >= d.valid_since, false)
              AS current
       FROM derived_values v
       LEFT JOIN derived_definitions d ON d.world_id = v.world_id AND d.name = v.name
      WHERE v.world_id = $1 AND v.object_type = $2 AND v.pk = $3 ORDER BY v.name`,
    [worldId, type, pk],
  );
  return rows;
}
