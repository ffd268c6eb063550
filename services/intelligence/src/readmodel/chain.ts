/**
 * Reads through a fork's chain (docs/adr/0033, decision 2): a fork's object that the fork has not
 * written is its base's as of the fork point, recursively (migration 014's `rm_chain`,
 * `rm_object_at`, `rm_derived_at`). A world without a base never takes these paths: its own row
 * answers, or its miss costs one probe of `world_bases`.
 */
import { awaitApplied, type Queryable } from '@onto/shared';
import type { StoredValue } from '../derived/repository.js';

/** A world's base as intelligence knows it: none, known, or a fork whose commit is not recorded yet. */
export type Base = { kind: 'none' } | { kind: 'known'; world: string; seq: number } | { kind: 'pending' };

export async function baseOf(db: Queryable, worldId: string): Promise<Base> {
  const { rows } = await db.query<{ parent: string | null; base: string | null; seq: string | null }>(
    `SELECT CASE WHEN w.reads_through THEN w.parent_world END AS parent, b.base_world AS base, b.base_seq::text AS seq
       FROM (SELECT $1::text AS id) k
       LEFT JOIN worlds w ON w.id = k.id
       LEFT JOIN world_bases b ON b.world_id = k.id`,
    [worldId],
  );
  const row = rows[0];
  if (row?.base) return { kind: 'known', world: row.base, seq: Number(row.seq) };
  return row?.parent ? { kind: 'pending' } : { kind: 'none' };
}

/**
 * The world's base, waiting (bounded, then 503) while it is a fork whose commit intelligence has
 * not recorded yet: control can call a fork READY a moment before data's `world.provisioned`
 * reaches intelligence's other consumer; a read then waits for it rather than answer 404.
 */
export async function awaitBase(db: Queryable, worldId: string, boundMs: number): Promise<Base> {
  let base = await baseOf(db, worldId);
  if (base.kind !== 'pending') return base;
  await awaitApplied(
    async () => {
      base = await baseOf(db, worldId);
      return base.kind === 'pending' ? 0 : 1;
    },
    1,
    { boundMs, poll: { initialMs: 5, maxMs: 100 } },
    () => `intelligence has not yet recorded the commit ${worldId} was forked at; retry shortly`,
  );
  return base;
}

/**
 * Whether a token's data write `n`, which the world itself has not applied, is covered through
 * the chain: some base read at a point >= n (so the write, if it is the base's, is inherited) has
 * applied it.
 */
export async function coveredThroughChain(db: Queryable, worldId: string, n: number): Promise<boolean> {
  const { rows } = await db.query<{ covered: boolean }>(
    `SELECT EXISTS (SELECT 1 FROM rm_chain($1) c JOIN data_watermarks d ON d.world_id = c.world_id
                     WHERE c.depth > 0 AND c.point >= $2 AND d.seq >= $2) AS covered`,
    [worldId, n],
  );
  return rows[0]?.covered === true;
}

export interface ChainObject {
  /** The world whose row decided: the fork itself, or a base. */
  world: string;
  version: number;
  seq: number;
  properties: Record<string, unknown>;
}

/**
 * One object through the chain with its derived values, in one statement, now or at a data
 * commit; undefined when absent or deleted at the deciding world. Per name, a value is the nearest world's by its point, and is
 * current when the fork's own definition of that name has the version it was computed by.
 */
export async function inheritedObject(
  db: Queryable,
  worldId: string,
  type: string,
  pk: string,
  /** A data commit to read the world at (`?at=`, migration 015); absent: now. */
  commit?: number,
): Promise<{ object: ChainObject; values: StoredValue[] } | undefined> {
  const params = commit === undefined ? [worldId, type, pk] : [worldId, type, pk, commit];
  const args = commit === undefined ? '$1, $2, $3' : '$1, $4::bigint, $2, $3';
  const { rows } = await db.query<{
    world: string;
    version: number;
    seq: number;
    deleted: boolean;
    properties: Record<string, unknown>;
    values: StoredValue[];
  }>(
    `SELECT o.world_id AS world, o.version::float8 AS version, o.seq::float8 AS seq, o.deleted, o.properties,
            (SELECT coalesce(jsonb_agg(jsonb_build_object(
                      'name', v.name, 'value', v.value, 'kind', v.value_kind, 'error', v.error,
                      'computedAt', to_json(v.computed_at)#>>'{}', 'definitionVersion', v.definition_version,
                      'sourceVersion', v.source_version, 'sourceSeq', v.source_seq, 'sources', v.sources,
                      'current', coalesce(d.state = 'valid' AND v.definition_version = d.version
                                          AND v.computed_at >= d.valid_since, false)) ORDER BY v.name), '[]')
               FROM rm_derived_at(${args}) v
               LEFT JOIN derived_definitions d ON d.world_id = $1 AND d.name = v.name) AS values
       FROM rm_object_at(${args}) o`,
    params,
  );
  const row = rows[0];
  if (!row || row.deleted) return undefined;
  const { values, deleted: _, ...object } = row;
  return { object, values };
}
