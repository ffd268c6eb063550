/** Reads and writes of merges, their parts and conflicts; no decisions here (saga.ts makes them). */
import { newEvent, Outbox, TOPICS } from '@onto/shared';
import type pg from 'pg';
import { emptySchema, type SchemaDocument } from '../schema/model.js';
import type { Lineage, Point } from './base.js';
import type { History } from './schema-merge.js';

export type MergeStatus = 'RUNNING' | 'CONFLICTS' | 'PROPOSED' | 'MERGED' | 'FAILED' | 'COMPENSATED';
export type MergePhase = 'planning' | 'conflicts' | 'proposed' | 'applying' | 'compensating' | 'done';
export const SERVICES = ['data', 'intelligence'] as const;
export type Service = (typeof SERVICES)[number];

export interface Failure {
  service: string;
  phase: string;
  status: number;
  reason: string;
  field?: string;
}

export interface MergeRow {
  id: string;
  target: string;
  source: string;
  strategy: 'SOURCE_WINS' | 'TARGET_WINS' | 'TIMESTAMP_WINS' | 'MANUAL';
  dry_run: boolean;
  status: MergeStatus;
  phase: MergePhase;
  base: Point | null;
  /** A revert: the merge it undoes (docs/adr/0081). */
  reverts: string | null;
  /**
   * The id data and intelligence know the current plan by (docs/adr/0085): the merge's id, or a
   * new one for each new plan a proposal was sent back for. Every event to them names this one.
   */
  plan_id: string;
  /** The plan round: 0, then one more for each new plan. */
  round: number;
  /** Why the last new plan was asked for, or null. */
  sent_back: SentBack | null;
  /** The required checks of the current plan, or null (none asked for). */
  checks: Checks | null;
  source_schema_version: number;
  target_schema_version: number;
  source_data_seq: string | null;
  source_definitions: string | null;
  merged_schema: SchemaDocument;
  applied_schema_version: number | null;
  compensated_schema_version: number | null;
  result: { schemaVersion: number; dataSeq: number | null; definitions: number | null } | null;
  failure: Failure | null;
  actor: string;
  planned_at: string | null;
  deadline_at: Date | null;
  created_at: Date;
  updated_at: Date;
}

export interface SentBack {
  round: number;
  reason: string;
  at: string;
}

export interface CheckResult {
  rule: string;
  /** The objects it fired on (at most 200 named), and how many there were. */
  fired: { type: string; pk: string }[];
  firedCount: number;
  errors: string[];
}

export interface Checks {
  planId: string;
  required: string[];
  state: 'running' | 'passed' | 'failed';
  results: CheckResult[];
  ranAt: string | null;
}

export interface PartRow {
  service: Service;
  state: 'planned' | 'applied' | 'failed' | 'compensated';
  source_pos: string | null;
  target_pos: string | null;
  changes: Record<string, number>;
  conflicts: number;
  applied: Record<string, number> | null;
  reverted: Record<string, number> | null;
  not_reverted: unknown[] | null;
  failure: Failure | null;
}

export async function lockMerge(tx: pg.ClientBase, id: string): Promise<MergeRow | undefined> {
  const { rows } = await tx.query<MergeRow>('SELECT * FROM merges WHERE id = $1 FOR UPDATE', [id]);
  return rows[0];
}

/** The merge whose current plan is `planId` (a reply names the plan), locked; undefined for an old plan's. */
export async function lockMergeOfPlan(tx: pg.ClientBase, planId: string): Promise<MergeRow | undefined> {
  const { rows } = await tx.query<MergeRow>('SELECT * FROM merges WHERE plan_id = $1 FOR UPDATE', [planId]);
  return rows[0];
}

/** The owners who approved the merge's current round, oldest first. */
export async function approvals(
  db: pg.ClientBase | pg.Pool,
  merge: Pick<MergeRow, 'id' | 'round'>,
): Promise<{ by: string; at: string }[]> {
  const { rows } = await db.query<{ by: string; at: string }>(
    `SELECT approver AS by, to_json(approved_at)#>>'{}' AS at FROM merge_approvals
      WHERE merge_id = $1 AND round = $2 ORDER BY approved_at, approver`,
    [merge.id, merge.round],
  );
  return rows;
}

export async function parts(db: pg.ClientBase | pg.Pool, id: string): Promise<PartRow[]> {
  const { rows } = await db.query<PartRow>('SELECT * FROM merge_parts WHERE merge_id = $1 ORDER BY service', [id]);
  return rows;
}

export async function unresolvedCount(db: pg.ClientBase | pg.Pool, id: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM merge_conflicts WHERE merge_id = $1 AND resolved_at IS NULL',
    [id],
  );
  return rows[0]?.n ?? 0;
}

export async function updateMerge(tx: pg.ClientBase, id: string, set: Record<string, unknown>): Promise<void> {
  const columns = Object.entries(set);
  await tx.query(
    `UPDATE merges SET ${columns.map(([c], i) => `${c} = $${i + 2}`).join(', ')}, updated_at = now() WHERE id = $1`,
    [id, ...columns.map(([, v]) => v)],
  );
}

/** A deadline `ms` from now, as SQL can compare it. */
export const deadline = (ms: number) => new Date(Date.now() + ms).toISOString();

/** Emits one of control's merge events on onto.worlds, keyed by the target world. */
export async function emit(
  tx: pg.ClientBase,
  topicPrefix: string,
  type:
    | 'world.merge.requested'
    | 'world.merge.conflict.resolved'
    | 'world.merge.apply'
    | 'world.merge.compensate'
    | 'world.merge.verify.requested'
    | 'world.merge.stage.requested'
    | 'world.merge.check.requested',
  target: string,
  payload: Record<string, unknown>,
  requestId?: string,
): Promise<void> {
  const event = newEvent({
    type,
    worldId: target,
    key: target,
    version: 0,
    producer: 'control',
    producerSeq: 0,
    payload,
  });
  await new Outbox(tx, topicPrefix).add({
    event,
    key: TOPICS['onto.worlds'].key({ worldId: target }),
    ...(requestId ? { headers: { 'x-request-id': requestId } } : {}),
  });
}

/** Forks and MERGED merges: what a merge base is computed from (docs/adr/0037). */
export async function readLineage(db: pg.ClientBase | pg.Pool): Promise<Lineage> {
  const forks = await db.query<{ id: string; point: Point }>(
    `SELECT id, json_build_object('world', parent_world, 'schemaVersion', coalesce(parent_schema_version, 0),
            'dataSeq', coalesce(parent_commit, 0), 'definitions', coalesce(parent_definitions, 0)) AS point
       FROM worlds WHERE parent_world IS NOT NULL`,
  );
  const merges = await db.query<{ source: Point; result: Point }>(
    `SELECT json_build_object('world', source, 'schemaVersion', source_schema_version,
              'dataSeq', coalesce(source_data_seq, 0), 'definitions', coalesce(source_definitions, 0)) AS source,
            json_build_object('world', target, 'schemaVersion', (result->>'schemaVersion')::int,
              'dataSeq', coalesce((result->>'dataSeq')::bigint, 0),
              'definitions', coalesce((result->>'definitions')::bigint, 0)) AS result
       FROM merges WHERE status = 'MERGED' AND NOT dry_run`,
  );
  return { forks: new Map(forks.rows.map((r) => [r.id, r.point])), merges: merges.rows };
}

/** The document of a world's schema at a version (0: empty). */
export async function schemaAt(db: pg.ClientBase | pg.Pool, world: string, version: number): Promise<SchemaDocument> {
  if (version <= 0) return emptySchema();
  const { rows } = await db.query<{ document: SchemaDocument }>(
    'SELECT document FROM schema_versions WHERE world_id = $1 AND version = $2',
    [world, version],
  );
  return rows[0]?.document ?? emptySchema();
}

/** A world's schema versions after one and up to another, oldest first, for TIMESTAMP_WINS. */
export async function schemaHistory(
  db: pg.ClientBase | pg.Pool,
  world: string,
  after: number,
  upTo: number,
): Promise<History> {
  const { rows } = await db.query<{ createdAt: string; document: SchemaDocument }>(
    `SELECT to_json(created_at)#>>'{}' AS "createdAt", document FROM schema_versions
      WHERE world_id = $1 AND version > $2 AND version <= $3 ORDER BY version`,
    [world, after, upTo],
  );
  return rows;
}
