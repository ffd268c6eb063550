import type { Queryable } from '@onto/shared';
import { type Choice, classifyLink, classifyObject, resolveObject, type State } from './classify.js';

/** A merge as recorded (table merges). */
export type MergeRow = {
  id: string;
  target: string;
  source: string;
  strategy: 'SOURCE_WINS' | 'TARGET_WINS' | 'TIMESTAMP_WINS' | 'MANUAL';
  dry_run: boolean;
  actor: string;
  base_world: string | null;
  base_seq: string | null;
  source_seq: string;
  target_seq: string;
  status: 'planned' | 'applied' | 'compensated';
  schema: Record<string, unknown>;
  commit_seq: string | null;
  schema_version: number | null;
  /** A revert: the merge it undoes (docs/adr/0081). */
  reverts: string | null;
};

/** A merge of target world `world` (every event about a merge is keyed by its target). */
export async function loadMerge(db: Queryable, world: string, id: string, lock = false): Promise<MergeRow | undefined> {
  const { rows } = await db.query<MergeRow>(
    `SELECT * FROM merges WHERE world_id = $1 AND id = $2 ${lock ? 'FOR UPDATE' : ''}`,
    [world, id],
  );
  return rows[0];
}

/** A recorded item with its conflicts' choices. */
export type StoredItem = {
  n: number;
  kind: 'object' | 'link';
  type: string;
  pk: string;
  to_pk: string;
  from_type: string | null;
  to_type: string | null;
  base: State | true;
  source: State | true;
  target: State | true;
  merged: State | true;
  target_seq: string | null;
  target_version: string;
  written_version: string | null;
  written_seq: string | null;
  conflicts: {
    id: string;
    type: string;
    property: string | null;
    take: string | null;
    value: unknown;
    by: string | null;
  }[];
};

export async function loadItems(db: Queryable, m: Pick<MergeRow, 'id' | 'target'>): Promise<StoredItem[]> {
  // The conflicts aggregated once and joined: a subquery per item cost seconds at 100,000 items.
  const { rows } = await db.query<StoredItem>(
    `SELECT i.n, i.kind, i.type, i.pk, i.to_pk, i.from_type, i.to_type, i.base, i.source, i.target, i.target_seq,
            i.target_version, i.merged, i.written_version, i.written_seq, coalesce(c.conflicts, '[]') AS conflicts
       FROM merge_items i
       LEFT JOIN (
         SELECT item, json_agg(json_build_object('id', id, 'type', type, 'property', property, 'take', take,
                                                 'value', value, 'by', resolved_by) ORDER BY id) AS conflicts
           FROM merge_conflicts WHERE world_id = $2 AND merge_id = $1 GROUP BY item
       ) c ON c.item = i.n
      WHERE i.world_id = $2 AND i.merge_id = $1 ORDER BY i.n`,
    [m.id, m.target],
  );
  return rows;
}

export const choiceOf = (c: { take: string | null; value: unknown }): Choice | null =>
  c.take === null
    ? null
    : c.take === 'value'
      ? { take: 'value', value: c.value ?? null }
      : { take: c.take as 'source' | 'target' };

/**
 * An item's final state from its three states and its conflicts' current choices (a person's
 * resolution replaces the strategy's), or the id of a conflict still open.
 */
export function finalState(item: StoredItem): { state: State | true } | { open: string } {
  const open = item.conflicts.find((c) => c.take === null);
  if (open) return { open: open.id };
  // Settled by the strategy alone: the plan stored the result.
  if (!personChose(item)) return { state: item.merged };
  if (item.kind === 'link') {
    let live = classifyLink(item.base === true, item.source === true, item.target === true);
    for (const c of item.conflicts) {
      const choice = choiceOf(c);
      if (!choice) continue;
      live =
        choice.take === 'source'
          ? item.source === true
          : choice.take === 'target'
            ? item.target === true
            : !!choice.value;
    }
    return { state: live ? true : null };
  }
  const [b, s, t] = [item.base as State, item.source as State, item.target as State];
  const { merged } = classifyObject(b, s, t);
  return {
    state: resolveObject(
      merged,
      s,
      t,
      item.conflicts.map((c) => ({
        type: c.type as 'MODIFY_MODIFY',
        property: c.property ?? undefined,
        choice: choiceOf(c),
      })),
    ),
  };
}

/** Whether a person resolved one of the item's conflicts (its stored merged state is then not final). */
export const personChose = (item: StoredItem) => item.conflicts.some((c) => c.by === 'person');
