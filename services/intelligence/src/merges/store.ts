/** The stored merges (table definition_merges) and intelligence's replies to control about them. */
import { newEvent, Outbox, type Queryable, TOPICS } from '@onto/shared';
import type { Entry, Points } from './plan.js';
import type { Strategy } from './three-way.js';

export interface Merge {
  id: string;
  source: string;
  target: string;
  strategy: Strategy;
  dryRun: boolean;
  points: Points;
  schema: Record<string, unknown>;
  entries: Entry[];
  status: 'planned' | 'applied' | 'compensated' | 'cancelled';
  applied: Record<string, number> | null;
  appliedPosition: number | null;
  replaced: Replaced[] | null;
}

/** What the apply replaced in the target: written back by a compensation if still the merge's. */
export interface Replaced {
  kind: Entry['kind'];
  name: string;
  /** The target's body and version before the merge (null: absent). */
  before: Entry['target'];
  beforeVersion: number | null;
  /** The version the merge left (null: the merge deleted it). */
  afterVersion: number | null;
}

export async function insertMerge(tx: Queryable, m: Merge): Promise<boolean> {
  const { rowCount } = await tx.query(
    `INSERT INTO definition_merges (world_id, id, source, target, strategy, dry_run, base_world, base_position,
                                    source_position, target_position, schema, entries, status)
     VALUES ($3, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb, $11::jsonb, 'planned')
     ON CONFLICT (world_id, id) DO NOTHING`,
    [
      m.id,
      m.source,
      m.target,
      m.strategy,
      m.dryRun,
      m.points.base?.world ?? null,
      m.points.base?.position ?? 0,
      m.points.source.position,
      m.points.target.position,
      JSON.stringify(m.schema),
      JSON.stringify(m.entries),
    ],
  );
  return (rowCount ?? 0) > 0;
}

/**
 * A merge, locked for the rest of the transaction (one of its events at a time). `world` is its
 * target, which keys every event about it.
 */
export async function lockMerge(tx: Queryable, world: string, id: string): Promise<Merge | undefined> {
  const { rows } = await tx.query<Record<string, unknown>>(
    'SELECT * FROM definition_merges WHERE world_id = $1 AND id = $2 FOR UPDATE',
    [world, id],
  );
  const r = rows[0];
  if (!r) return undefined;
  return {
    id: String(r.id),
    source: r.source as string,
    target: r.target as string,
    strategy: r.strategy as Strategy,
    dryRun: r.dry_run as boolean,
    points: {
      base: r.base_world === null ? null : { world: r.base_world as string, position: Number(r.base_position) },
      source: { world: r.source as string, position: Number(r.source_position) },
      target: { world: r.target as string, position: Number(r.target_position) },
    },
    schema: r.schema as Record<string, unknown>,
    entries: r.entries as Entry[],
    status: r.status as Merge['status'],
    applied: (r.applied as Record<string, number> | null) ?? null,
    appliedPosition: r.applied_position === null ? null : Number(r.applied_position),
    replaced: (r.replaced as Replaced[] | null) ?? null,
  };
}

export async function updateMerge(
  tx: Queryable,
  m: Pick<Merge, 'id' | 'target'>,
  change: Partial<Pick<Merge, 'entries' | 'status' | 'applied' | 'appliedPosition' | 'replaced'>>,
): Promise<void> {
  await tx.query(
    `UPDATE definition_merges
        SET entries = coalesce($2::jsonb, entries), status = coalesce($3, status),
            applied = coalesce($4::jsonb, applied), applied_position = coalesce($5, applied_position),
            replaced = coalesce($6::jsonb, replaced), updated_at = now()
      WHERE world_id = $7 AND id = $1`,
    [
      m.id,
      change.entries ? JSON.stringify(change.entries) : null,
      change.status ?? null,
      change.applied ? JSON.stringify(change.applied) : null,
      change.appliedPosition ?? null,
      change.replaced ? JSON.stringify(change.replaced) : null,
      m.target,
    ],
  );
}

type Reply =
  | 'intelligence.merge.planned'
  | 'intelligence.merge.conflicts.found'
  | 'intelligence.merge.applied'
  | 'intelligence.merge.failed'
  | 'intelligence.merge.compensated'
  | 'intelligence.merge.verified'
  | 'intelligence.merge.checked';

/** A reply on onto.intelligence, keyed by the target world, caused by control's event. */
export async function reply(
  tx: Queryable,
  topicPrefix: string,
  cause: { event_id: string; world_id: string },
  type: Reply,
  payload: Record<string, unknown>,
): Promise<void> {
  const event = newEvent({
    type,
    worldId: cause.world_id,
    key: cause.world_id,
    version: 0,
    producer: 'intelligence',
    producerSeq: 0,
    causedBy: cause.event_id,
    payload: { service: 'intelligence', ...payload },
  });
  await new Outbox(tx, topicPrefix).add({ event, key: TOPICS['onto.intelligence'].key({ worldId: cause.world_id }) });
}
