/**
 * The merge saga as control runs it (docs/adr/0037): start, collect the plans, stop at CONFLICTS
 * or apply control's part and ask for the others', then MERGED, or compensate. Every step runs in
 * the transaction of the request or of the consumed replies, with its events in the outbox.
 */
import { Conflict, HttpProblem, inTransaction, uuidv7 } from '@onto/shared';
import type pg from 'pg';
import { currentSchema, writeVersion } from '../schema/repository.js';
import { protectionOf } from '../worlds/protection.js';
import { mergeBase, type Point } from './base.js';
import {
  approvals,
  type CheckResult,
  type Checks,
  deadline,
  emit,
  lockMerge,
  type MergeRow,
  type PartRow,
  parts,
  readLineage,
  SERVICES,
  type Service,
  schemaAt,
  schemaHistory,
  unresolvedCount,
  updateMerge,
} from './repository.js';
import { describeErrors, invalidTypes, mergeSchemas, type Strategy } from './schema-merge.js';

export interface SagaContext {
  topicPrefix: string;
  /** How long each phase (planning, applying, compensating) may take before the merge fails. */
  timeoutMs: number;
}

export interface StartMerge {
  target: string;
  source: string;
  strategy: Strategy;
  dryRun: boolean;
  actor: string;
  requestId: string;
  /**
   * A revert (docs/adr/0081): the MERGED merge of the target it undoes. The source is the target
   * before it (its schema: the version that merge read), the base the target's point after it.
   */
  reverts?: MergeRow;
}

const requestIdOf = (id: string) => `merge:${id}`;

/** Refuses a second merge while one is RUNNING against the target (409 naming it). */
async function refuseRunning(tx: pg.ClientBase, target: string, except?: string): Promise<void> {
  const { rows } = await tx.query<{ id: string }>(
    "SELECT id FROM merges WHERE target = $1 AND status = 'RUNNING' AND id IS DISTINCT FROM $2::uuid",
    [target, except ?? null],
  );
  if (rows[0]) {
    throw new Conflict(`merge ${rows[0].id} is running against ${target}: one merge at a time`, {
      runningMerge: rows[0].id,
    });
  }
}

/** A unique violation of merges_one_running (two merges racing past refuseRunning) is the same 409. */
async function guarded<T>(target: string, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    if ((error as { code?: string }).code === '23505')
      throw new Conflict(`another merge is running against ${target}: one merge at a time`);
    throw error;
  }
}

/**
 * Step 1: the base, control's schema merge, the merge stored RUNNING with its schema conflicts
 * (settled by the strategy where one can), and `world.merge.requested`. Returns the merge id.
 */
export async function startMerge(tx: pg.ClientBase, ctx: SagaContext, req: StartMerge): Promise<string> {
  await refuseRunning(tx, req.target);
  const part = await planControlPart(tx, req);
  const id = uuidv7();
  await guarded(req.target, () =>
    tx.query(
      `INSERT INTO merges (id, plan_id, target, source, strategy, dry_run, status, phase, base, source_schema_version,
                           target_schema_version, merged_schema, actor, deadline_at, reverts)
       VALUES ($1, $1, $2, $3, $4, $5, 'RUNNING', 'planning', $6, $7, $8, $9, $10, $11, $12)`,
      [
        id,
        req.target,
        req.source,
        req.strategy,
        req.dryRun,
        part.base ? JSON.stringify(part.base) : null,
        part.sourceVersion,
        part.targetVersion,
        part.merged.document,
        req.actor,
        deadline(ctx.timeoutMs),
        req.reverts?.id ?? null,
      ],
    ),
  );
  await insertSchemaConflicts(tx, id, req.strategy, part.merged.conflicts);
  await requestPlans(tx, ctx, { ...req, planId: id, base: part.base, schema: part.merged.document }, req.requestId);
  return id;
}

/** control's part of a plan: the base, the schema versions read and the merged schema. */
async function planControlPart(
  tx: pg.ClientBase,
  req: { target: string; source: string; strategy: Strategy; reverts?: MergeRow | undefined },
) {
  const base = req.reverts ? revertBase(req.reverts) : mergeBase(await readLineage(tx), req.source, req.target);
  const targetHead = await currentSchema(tx, req.target);
  const sourceVersion = req.reverts ? req.reverts.target_schema_version : (await currentSchema(tx, req.source)).version;
  const merged = await computeSchemaPart(tx, { ...req, base, sourceVersion, targetVersion: targetHead.version });
  return { base, sourceVersion, targetVersion: targetHead.version, merged };
}

async function insertSchemaConflicts(
  tx: pg.ClientBase,
  id: string,
  strategy: Strategy,
  conflicts: Awaited<ReturnType<typeof computeSchemaPart>>['conflicts'],
): Promise<void> {
  for (const c of conflicts) {
    await tx.query(
      `INSERT INTO merge_conflicts (merge_id, id, type, entity, base, source, target, source_at, target_at, reason,
                                    needs_person, resolution_take, resolved_by, resolved_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::text, CASE WHEN $12::text IS NULL THEN NULL ELSE $13 END,
               CASE WHEN $12::text IS NULL THEN NULL ELSE now() END)`,
      [
        id,
        c.id,
        c.type,
        c.entity,
        JSON.stringify(c.base),
        JSON.stringify(c.source),
        JSON.stringify(c.target),
        c.sourceAt,
        c.targetAt,
        c.reason ?? null,
        c.needsPerson,
        c.take ?? null,
        `strategy:${strategy}`,
      ],
    );
  }
}

/** `world.merge.requested`: data and intelligence plan their parts under the plan id. */
async function requestPlans(
  tx: pg.ClientBase,
  ctx: SagaContext,
  m: {
    planId: string;
    source: string;
    target: string;
    strategy: Strategy;
    dryRun: boolean;
    base: Point | null;
    schema: unknown;
    actor: string;
    reverts?: MergeRow | undefined;
  },
  requestId?: string,
): Promise<void> {
  await emit(
    tx,
    ctx.topicPrefix,
    'world.merge.requested',
    m.target,
    {
      merge: m.planId,
      source: m.source,
      target: m.target,
      strategy: m.strategy,
      dryRun: m.dryRun,
      base: m.base ? toWire(m.base) : null,
      schema: m.schema,
      actor: m.actor,
      // The services know the reverted merge by the plan that applied.
      ...(m.reverts ? { reverts: m.reverts.plan_id } : {}),
    },
    requestId,
  );
}

/**
 * The base of a revert: the target right after the merge it undoes (its recorded result), so
 * that the three-way merge with the target before it as the source yields the inverse.
 */
function revertBase(merge: MergeRow): Point {
  if (merge.status !== 'MERGED' || merge.dry_run || !merge.result) {
    throw new Conflict(
      `merge ${merge.id} is ${merge.dry_run ? 'a dry run' : merge.status}, not MERGED: only a merge that applied can be reverted`,
      { mergeStatus: merge.status, errors: [{ path: '/id', message: `must be MERGED, not ${merge.status}` }] },
    );
  }
  return {
    world: merge.target,
    schemaVersion: merge.result.schemaVersion,
    dataSeq: merge.result.dataSeq ?? 0,
    definitions: merge.result.definitions ?? 0,
  };
}

/**
 * control's three-way merge of the schemas at the points given; the same inputs give the same
 * result (merge-verify recomputes a finished merge with it).
 */
export async function computeSchemaPart(
  db: pg.ClientBase | pg.Pool,
  m: {
    source: string;
    target: string;
    strategy: Strategy;
    base: Point | null;
    sourceVersion: number;
    targetVersion: number;
  },
) {
  const baseDoc = await schemaAt(db, m.base?.world ?? m.target, m.base ? m.base.schemaVersion : 0);
  const since = (world: string) => (m.base?.world === world ? m.base.schemaVersion : 0);
  const timestamps = m.strategy === 'TIMESTAMP_WINS';
  return mergeSchemas({
    base: baseDoc,
    source: await schemaAt(db, m.source, m.sourceVersion),
    target: await schemaAt(db, m.target, m.targetVersion),
    strategy: m.strategy,
    ...(timestamps
      ? {
          sourceHistory: await schemaHistory(db, m.source, since(m.source), m.sourceVersion),
          targetHistory: await schemaHistory(db, m.target, since(m.target), m.targetVersion),
        }
      : {}),
  });
}

const toWire = (p: Point) => ({
  world: p.world,
  schemaVersion: p.schemaVersion,
  dataSeq: p.dataSeq,
  definitions: p.definitions,
});

/**
 * Step 3, with every plan in: a dry run ends; unresolved conflicts stop at CONFLICTS; otherwise
 * control applies its part.
 */
export async function afterPlans(tx: pg.ClientBase, ctx: SagaContext, merge: MergeRow): Promise<void> {
  const ps = await parts(tx, merge.id);
  if (!SERVICES.every((s) => ps.some((p) => p.service === s && p.state === 'planned'))) return;
  await updateMerge(tx, merge.id, { planned_at: new Date().toISOString() });
  const unresolved = await unresolvedCount(tx, merge.id);
  if (merge.dry_run) {
    await updateMerge(tx, merge.id, {
      status: unresolved > 0 ? 'CONFLICTS' : 'MERGED',
      phase: 'done',
      deadline_at: null,
    });
    return;
  }
  if (unresolved > 0) {
    await updateMerge(tx, merge.id, { status: 'CONFLICTS', phase: 'conflicts', deadline_at: null });
    return;
  }
  if (isProposal(await gates(tx, merge))) return propose(tx, ctx, merge);
  await applyControlPart(tx, ctx, merge);
}

/**
 * What the target's protection asks of a merge now (docs/adr/0085): approvals by owners other
 * than its author, and rules that must not fire on its result. A dry run applies nothing: none.
 */
async function gates(tx: pg.ClientBase, merge: MergeRow): Promise<{ approvals: number; checks: string[] }> {
  if (merge.dry_run) return { approvals: 0, checks: [] };
  const p = await protectionOf(tx, merge.target);
  return { approvals: p.requiredApprovals, checks: p.requiredChecks };
}
const isProposal = (g: { approvals: number; checks: string[] }) => g.approvals > 0 || g.checks.length > 0;

/**
 * A merge into a protected world stops at PROPOSED (docs/adr/0085), its plan and conflicts kept,
 * unless a write it did not read is already known: then it is planned again. Required checks
 * start on its plan: data stages the objects it would leave (world.merge.stage.requested).
 */
async function propose(tx: pg.ClientBase, ctx: SagaContext, merge: MergeRow): Promise<void> {
  const why = await staleness(tx, merge);
  if (why) return sendBack(tx, ctx, merge, why);
  await updateMerge(tx, merge.id, { status: 'PROPOSED', phase: 'proposed', deadline_at: null, checks: null });
  await ensureChecks(tx, ctx, { ...merge, checks: null }, (await gates(tx, merge)).checks);
}

/**
 * Starts the required checks on the current plan unless they ran (or run) on it with the same
 * rules — a protection changed while the proposal waits asks for them again. True when started.
 */
async function ensureChecks(tx: pg.ClientBase, ctx: SagaContext, merge: MergeRow, checks: string[]): Promise<boolean> {
  const c = merge.checks;
  const same = c?.planId === merge.plan_id && c.required.join('\u0000') === checks.join('\u0000');
  if (checks.length === 0 || same) return false;
  await tx.query('DELETE FROM merge_check_chunks WHERE merge_id = $1', [merge.id]);
  const started: Checks = { planId: merge.plan_id, required: checks, state: 'running', results: [], ranAt: null };
  await updateMerge(tx, merge.id, { checks: started });
  await emit(tx, ctx.topicPrefix, 'world.merge.stage.requested', merge.target, { merge: merge.plan_id });
  return true;
}

/** data's staged objects, a chunk: forwarded to intelligence with the checks to run on them. */
export async function onStaged(
  tx: pg.ClientBase,
  ctx: SagaContext,
  merge: MergeRow,
  p: { chunk: number; chunks: number; objects: unknown[] },
): Promise<void> {
  if (merge.status !== 'PROPOSED' || merge.phase !== 'proposed' || merge.checks?.planId !== merge.plan_id) return;
  await emit(tx, ctx.topicPrefix, 'world.merge.check.requested', merge.target, {
    merge: merge.plan_id,
    checks: merge.checks.required,
    chunk: p.chunk,
    chunks: p.chunks,
    objects: p.objects,
  });
}

/**
 * intelligence's results on a chunk: kept until every chunk is in, then folded per rule — passed
 * when no rule fired and each could be evaluated. Passed with the approvals in, the merge applies.
 */
export async function onChecked(
  tx: pg.ClientBase,
  ctx: SagaContext,
  merge: MergeRow,
  p: {
    chunk: number;
    chunks: number;
    results: { rule: string; fired: { type: string; pk: string }[]; error?: string | undefined }[];
  },
): Promise<void> {
  const checks = merge.checks;
  if (merge.status !== 'PROPOSED' || merge.phase !== 'proposed' || checks?.planId !== merge.plan_id) return;
  if (checks.state !== 'running') return;
  // An answer of an earlier run on this plan (other rules, the protection changed since): dropped.
  const rules = p.results.map((r) => r.rule);
  if (rules.length !== checks.required.length || checks.required.some((r, i) => rules[i] !== r)) return;
  await tx.query(
    `INSERT INTO merge_check_chunks (merge_id, plan_id, chunk, chunks, results) VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT DO NOTHING`,
    [merge.id, merge.plan_id, p.chunk, p.chunks, JSON.stringify(p.results)],
  );
  const { rows } = await tx.query<{ results: typeof p.results }>(
    'SELECT results FROM merge_check_chunks WHERE plan_id = $1 ORDER BY chunk',
    [merge.plan_id],
  );
  if (rows.length < p.chunks) return;
  const results: CheckResult[] = checks.required.map((rule) => {
    const all = rows.flatMap((r) => r.results.filter((x) => x.rule === rule));
    const fired = all.flatMap((x) => x.fired);
    return {
      rule,
      fired: fired.slice(0, 200),
      firedCount: fired.length,
      errors: all.flatMap((x) => (x.error ? [x.error] : [])).slice(0, 20),
    };
  });
  const passed = results.every((r) => r.firedCount === 0 && r.errors.length === 0);
  const done: Checks = { ...checks, state: passed ? 'passed' : 'failed', results, ranAt: new Date().toISOString() };
  await updateMerge(tx, merge.id, { checks: done });
  if (!passed) return;
  const g = await gates(tx, merge);
  // The protection names other rules now: they run instead.
  if (await ensureChecks(tx, ctx, { ...merge, checks: done }, g.checks)) return;
  const required = g.approvals;
  // Approved before the checks were in: applies now, unless another merge runs (then an approval applies it later).
  if ((await approvals(tx, merge)).length >= required && !(await runningAgainst(tx, merge))) {
    const why = await staleness(tx, merge);
    if (why) return sendBack(tx, ctx, merge, why);
    await applyApproved(tx, ctx, { ...merge, checks: done });
  }
}

async function runningAgainst(tx: pg.ClientBase, merge: MergeRow): Promise<boolean> {
  const { rows } = await tx.query("SELECT 1 FROM merges WHERE target = $1 AND status = 'RUNNING' AND id <> $2", [
    merge.target,
    merge.id,
  ]);
  return rows.length > 0;
}

/** A proposal with its approvals and checks in: applied as any merge (one running per target, else 409). */
async function applyApproved(tx: pg.ClientBase, ctx: SagaContext, merge: MergeRow): Promise<void> {
  await refuseRunning(tx, merge.target, merge.id);
  await guarded(merge.target, async () => {
    await updateMerge(tx, merge.id, { status: 'RUNNING', deadline_at: deadline(ctx.timeoutMs) });
    await applyControlPart(tx, ctx, merge);
  });
}

/** What a proposal's plan did not read, as control knows the worlds' positions. */
export interface Seen {
  /** data's newest write of the world (storage.position). */
  dataSeq?: number;
  /** intelligence's definition position of the world (intelligence.rules.changed). */
  definitions?: number;
}

/**
 * Why the plan of a merge no longer describes the worlds, or null: a write to the target or the
 * source after the plan read them — data's newest write of the world past the cut its plan read
 * at (control's version vector, storage.position), a rule change past intelligence's position, a
 * schema version past control's. `seen` adds positions of events not yet in the tables. A revert's
 * source is the target before the merge: only the target is compared.
 */
export async function staleness(
  tx: pg.ClientBase,
  merge: MergeRow,
  seen: ReadonlyMap<string, Seen> = new Map(),
): Promise<string | null> {
  const ps = await parts(tx, merge.id);
  const pos = (service: Service, side: 'source' | 'target') => {
    const p = ps.find((x) => x.service === service);
    const v = side === 'source' ? p?.source_pos : p?.target_pos;
    return v === null || v === undefined ? null : Number(v);
  };
  const sides: ['source' | 'target', string][] = [['target', merge.target]];
  if (!merge.reverts) sides.push(['source', merge.source]);
  for (const [side, world] of sides) {
    const { rows } = await tx.query<{ data_seq: string | null; definitions: string | null }>(
      `SELECT (SELECT data_seq FROM world_positions WHERE world_id = $1 AND service = 'data')::text AS data_seq,
              (SELECT definitions FROM world_rules WHERE world_id = $1)::text AS definitions`,
      [world],
    );
    const known = seen.get(world);
    const dataSeq = Math.max(Number(rows[0]?.data_seq ?? 0), known?.dataSeq ?? 0);
    const definitions = Math.max(Number(rows[0]?.definitions ?? 0), known?.definitions ?? 0);
    const readData = pos('data', side);
    if (readData !== null && dataSeq > readData) {
      return `the ${side} ${world} was written after the plan read it (data's write ${dataSeq}, the plan read up to ${readData})`;
    }
    const readDefinitions = pos('intelligence', side);
    if (readDefinitions !== null && definitions > readDefinitions) {
      return `the rules of the ${side} ${world} changed after the plan read them (definition ${definitions}, the plan read up to ${readDefinitions})`;
    }
    const version = (await currentSchema(tx, world)).version;
    const readVersion = side === 'target' ? merge.target_schema_version : merge.source_schema_version;
    if (version !== readVersion) {
      return `the schema of the ${side} ${world} moved from version ${readVersion} to ${version} after the plan read it`;
    }
  }
  return null;
}

/**
 * Sends a proposal back for a new plan (docs/adr/0085): a new round under a new plan id (data and
 * intelligence answer a plan id they know with the same plan), control's part computed again, the
 * old round's parts, conflicts and approvals left behind, the old plan cancelled in the services
 * (world.merge.compensate of a plan not applied) and the new one asked for, in one transaction.
 */
export async function sendBack(tx: pg.ClientBase, ctx: SagaContext, merge: MergeRow, reason: string): Promise<void> {
  const reverts = merge.reverts ? await lockMerge(tx, merge.reverts) : undefined;
  const part = await planControlPart(tx, { ...merge, reverts });
  const planId = uuidv7();
  const round = merge.round + 1;
  await tx.query('DELETE FROM merge_conflicts WHERE merge_id = $1', [merge.id]);
  await tx.query('DELETE FROM merge_parts WHERE merge_id = $1', [merge.id]);
  await updateMerge(tx, merge.id, {
    plan_id: planId,
    round,
    status: 'PROPOSED',
    phase: 'planning',
    base: part.base ? JSON.stringify(part.base) : null,
    source_schema_version: part.sourceVersion,
    target_schema_version: part.targetVersion,
    merged_schema: part.merged.document,
    source_data_seq: null,
    source_definitions: null,
    planned_at: null,
    failure: null,
    deadline_at: deadline(ctx.timeoutMs),
    sent_back: { round, reason, at: new Date().toISOString() },
    checks: null,
  });
  await insertSchemaConflicts(tx, merge.id, merge.strategy, part.merged.conflicts);
  await emit(tx, ctx.topicPrefix, 'world.merge.compensate', merge.target, {
    merge: merge.plan_id,
    reason: `sent back for a new plan: ${reason}`,
  });
  await requestPlans(tx, ctx, {
    planId,
    source: merge.source,
    target: merge.target,
    strategy: merge.strategy,
    dryRun: merge.dry_run,
    base: part.base,
    schema: part.merged.document,
    actor: merge.actor,
    reverts,
  });
}

/**
 * An owner's approval of a proposal (docs/adr/0085): refused (nothing written) when the merge is
 * not waiting at PROPOSED, the approver wrote it, or approved this round already; a proposal whose
 * plan is stale is sent back instead (the answer says why). With the approvals the protection
 * asks for, the merge applies as any other (one running merge per target: else 409, nothing written).
 */
export async function approveMerge(
  tx: pg.ClientBase,
  ctx: SagaContext,
  merge: MergeRow,
  approver: string,
): Promise<{ approvals: number; required: number; sentBack: string | null }> {
  if (merge.status !== 'PROPOSED' || merge.phase !== 'proposed') {
    const state = merge.status === 'PROPOSED' ? 'PROPOSED but being planned again' : merge.status;
    throw new Conflict(`merge ${merge.id} is ${state}: only a proposal waiting at PROPOSED is approved`, {
      mergeStatus: merge.status,
      errors: [{ path: '/status', message: `must be PROPOSED, not ${state}` }],
    });
  }
  if (approver === merge.actor) {
    throw new HttpProblem(
      403,
      'forbidden',
      'Forbidden',
      `${approver} started merge ${merge.id}: requiredApprovals counts approvals by owners other than the merge's author`,
      { rule: 'requiredApprovals', errors: [{ path: '/approver', message: "must not be the merge's author" }] },
    );
  }
  const { rows: owner } = await tx.query(
    `SELECT 1 FROM world_roles WHERE world_id = $1 AND user_id = $2 AND role = 'owner'`,
    [merge.target, approver],
  );
  if (owner.length === 0) {
    throw new HttpProblem(
      403,
      'forbidden',
      'Forbidden',
      `${approver} is not an owner of world ${merge.target}: only its owners approve its merges`,
      { rule: 'requiredApprovals', errors: [{ path: '/approver', message: 'must be an owner of the world' }] },
    );
  }
  const { rows: had } = await tx.query(
    'SELECT 1 FROM merge_approvals WHERE merge_id = $1 AND round = $2 AND approver = $3',
    [merge.id, merge.round, approver],
  );
  if (had.length > 0) {
    throw new Conflict(`${approver} approved merge ${merge.id} already`, {
      errors: [{ path: '/approver', message: 'has approved this plan already' }],
    });
  }
  const why = await staleness(tx, merge);
  const g = await gates(tx, merge);
  if (why) {
    await sendBack(tx, ctx, merge, why);
    return { approvals: 0, required: g.approvals, sentBack: why };
  }
  await tx.query('INSERT INTO merge_approvals (merge_id, round, approver) VALUES ($1, $2, $3)', [
    merge.id,
    merge.round,
    approver,
  ]);
  const n = (await approvals(tx, merge)).length;
  const restarted = await ensureChecks(tx, ctx, merge, g.checks);
  const checked = g.checks.length === 0 || (!restarted && merge.checks?.state === 'passed');
  if (n >= g.approvals && checked) await applyApproved(tx, ctx, merge);
  return { approvals: n, required: g.approvals, sentBack: null };
}

/**
 * control's part: the merged schema as a new version of the target through the schema write path
 * (schema.updated as usual), then `world.merge.apply`, in one transaction. The target's schema must
 * be the one the merge read (optimistic concurrency): else the merge fails 409, nothing applied.
 */
export async function applyControlPart(tx: pg.ClientBase, ctx: SagaContext, merge: MergeRow): Promise<void> {
  const head = await currentSchema(tx, merge.target);
  const fail = (status: number, reason: string, field?: string) =>
    updateMerge(tx, merge.id, {
      status: 'FAILED',
      phase: 'done',
      deadline_at: null,
      failure: { service: 'control', phase: 'apply', status, reason, ...(field ? { field } : {}) },
    });
  if (head.version !== merge.target_schema_version) {
    return fail(
      409,
      `the schema of ${merge.target} moved from version ${merge.target_schema_version} to ${head.version} since the merge read it`,
    );
  }
  const invalid = invalidTypes(merge.merged_schema);
  if (invalid.length > 0) {
    const reasons = invalid.map((i) => `${i.apiName}: ${describeErrors(i.errors)}`).join('; ');
    return fail(422, `the merged schema is invalid: ${reasons}`, '/schema');
  }
  const written = await writeVersion(tx, {
    worldId: merge.target,
    author: merge.actor,
    requestId: requestIdOf(merge.id),
    before: head,
    after: merge.merged_schema,
    topicPrefix: ctx.topicPrefix,
  });
  const schemaVersion = written?.version ?? head.version;
  if (schemaVersion === 0) return fail(422, 'the merged schema is empty: there is nothing to merge into', '/schema');
  await updateMerge(tx, merge.id, {
    status: 'RUNNING',
    phase: 'applying',
    applied_schema_version: written?.version ?? null,
    deadline_at: deadline(ctx.timeoutMs),
  });
  await emit(tx, ctx.topicPrefix, 'world.merge.apply', merge.target, {
    merge: merge.plan_id,
    schemaVersion,
    schema: merge.merged_schema,
  });
}

/**
 * Step 5, failure: control reverts its schema part (a new version with the document it replaced,
 * unless the schema was written again since) and asks the others to undo theirs.
 */
export async function compensate(tx: pg.ClientBase, ctx: SagaContext, merge: MergeRow, reason: string): Promise<void> {
  let reverted = merge.compensated_schema_version;
  if (merge.applied_schema_version !== null && reverted === null) {
    const head = await currentSchema(tx, merge.target);
    if (head.version === merge.applied_schema_version) {
      const written = await writeVersion(tx, {
        worldId: merge.target,
        author: merge.actor,
        requestId: requestIdOf(merge.id),
        before: head,
        after: await schemaAt(tx, merge.target, merge.target_schema_version),
        topicPrefix: ctx.topicPrefix,
      });
      reverted = written?.version ?? head.version;
    }
  }
  await updateMerge(tx, merge.id, {
    phase: 'compensating',
    compensated_schema_version: reverted,
    deadline_at: deadline(ctx.timeoutMs),
  });
  await emit(tx, ctx.topicPrefix, 'world.merge.compensate', merge.target, { merge: merge.plan_id, reason });
  await endCompensation(tx, { ...merge, phase: 'compensating' });
}

/**
 * A compensation ends when no part is still planned (it may yet apply) or applied (not undone):
 * COMPENSATED if anything had been applied, FAILED if nothing was, or if a part could not undo.
 */
export async function endCompensation(tx: pg.ClientBase, merge: MergeRow, timedOut?: string): Promise<void> {
  const ps = await parts(tx, merge.id);
  const waiting = ps.filter((p) => p.state === 'planned' || p.state === 'applied');
  if (waiting.length > 0 && !timedOut) return;
  const undoFailed = ps.find((p) => p.state === 'failed' && p.failure?.phase === 'compensate');
  const anyApplied = merge.applied_schema_version !== null || ps.some((p) => p.applied !== null);
  const status = timedOut || undoFailed || !anyApplied ? 'FAILED' : 'COMPENSATED';
  await updateMerge(tx, merge.id, {
    status,
    phase: 'done',
    deadline_at: null,
    ...(timedOut || undoFailed
      ? {
          failure: {
            ...(merge.failure ?? {}),
            reason: `${merge.failure?.reason ?? 'the merge failed'}; ${
              timedOut ?? `${undoFailed?.service} could not undo its part: ${undoFailed?.failure?.reason}`
            }`,
          },
        }
      : {}),
  });
}

/**
 * Merges stuck past their deadline: planning → FAILED (nothing applied); applying → compensated
 * like a failure; compensating → FAILED, naming who did not answer. Like provisioning deadlines.
 */
export async function failOverdueMerges(pool: pg.Pool, ctx: SagaContext): Promise<string[]> {
  const { rows } = await pool.query<{ id: string }>(
    'SELECT id FROM merges WHERE deadline_at < now() ORDER BY deadline_at LIMIT 100',
  );
  const failed: string[] = [];
  for (const { id } of rows) {
    await inTransaction(pool, async (tx) => {
      const merge = await lockMerge(tx, id);
      if (!merge?.deadline_at || Date.parse(String(merge.deadline_at)) >= Date.now()) return;
      const ps = await parts(tx, id);
      const silent = (states: PartRow['state'][]) =>
        SERVICES.filter((s) => !ps.some((p) => p.service === s && states.includes(p.state))).join(', ');
      const seconds = ctx.timeoutMs / 1000;
      if (merge.phase === 'planning') {
        await updateMerge(tx, id, {
          status: 'FAILED',
          phase: 'done',
          deadline_at: null,
          failure: merge.failure ?? {
            service: silent(['planned']),
            phase: 'plan',
            status: 504,
            reason: `timed out after ${seconds} s waiting for the plan of ${silent(['planned'])}`,
          },
        });
      } else if (merge.phase === 'applying') {
        const failure = merge.failure ?? {
          service: silent(['applied']),
          phase: 'apply',
          status: 504,
          reason: `timed out after ${seconds} s waiting for ${silent(['applied'])} to apply`,
        };
        await updateMerge(tx, id, { failure });
        await compensate(tx, ctx, { ...merge, failure }, failure.reason);
      } else if (merge.phase === 'compensating') {
        await endCompensation(
          tx,
          merge,
          `timed out after ${seconds} s waiting for ${silent(['compensated', 'failed'])} to undo its part`,
        );
      }
      failed.push(id);
    });
  }
  return failed;
}

/**
 * Whether an HTTP caller may apply the merge now (step 3 re-entered by `POST …/apply`); into a
 * world that asks for approvals it becomes a proposal instead.
 */
export async function applyNow(tx: pg.ClientBase, ctx: SagaContext, merge: MergeRow): Promise<void> {
  if (merge.dry_run) throw new Conflict(`merge ${merge.id} is a dry run: it applies nothing`, { status: merge.status });
  if (merge.status === 'PROPOSED' && merge.phase === 'proposed') return applyProposal(tx, ctx, merge);
  if (merge.status !== 'CONFLICTS')
    throw new Conflict(`merge ${merge.id} is ${merge.status}, not CONFLICTS: there is nothing to apply`, {
      mergeStatus: merge.status,
    });
  const unresolved = await unresolvedCount(tx, merge.id);
  if (unresolved > 0) throw new Conflict(`merge ${merge.id} has ${unresolved} unresolved conflicts`, { unresolved });
  const invalid = invalidTypes(merge.merged_schema);
  if (invalid.length > 0) {
    throw new HttpProblem(422, 'unprocessable', 'Unprocessable Content', 'the merged schema is invalid', {
      errors: invalid.map((i) => ({ path: `/schema/${i.kind.kind}/${i.apiName}`, message: describeErrors(i.errors) })),
    });
  }
  // Into a world that asks for approvals: a proposal (docs/adr/0085), applied once approved.
  if (isProposal(await gates(tx, merge))) return propose(tx, ctx, merge);
  await refuseRunning(tx, merge.target, merge.id);
  await guarded(merge.target, async () => {
    await updateMerge(tx, merge.id, { status: 'RUNNING', deadline_at: deadline(ctx.timeoutMs) });
    await applyControlPart(tx, ctx, merge);
  });
}

/**
 * `POST …/apply` of a proposal whose approvals and checks are in (its apply had waited for another
 * running merge): applied now if its plan still holds, else sent back; 409 while something is missing.
 */
async function applyProposal(tx: pg.ClientBase, ctx: SagaContext, merge: MergeRow): Promise<void> {
  const g = await gates(tx, merge);
  const n = (await approvals(tx, merge)).length;
  const restarted = await ensureChecks(tx, ctx, merge, g.checks);
  const checked = g.checks.length === 0 || (!restarted && merge.checks?.state === 'passed');
  if (n < g.approvals || !checked) {
    // Checks (re)started for the protection as it is now: answered with the status, PROPOSED.
    if (restarted) return;
    throw new Conflict(
      `merge ${merge.id} is a proposal with ${n} of ${g.approvals} approvals and checks ${g.checks.length === 0 ? 'not asked for' : (merge.checks?.state ?? 'not run')}: it applies once approved and checked`,
      { mergeStatus: merge.status, approvals: n, requiredApprovals: g.approvals },
    );
  }
  const why = await staleness(tx, merge);
  if (why) return sendBack(tx, ctx, merge, why);
  await applyApproved(tx, ctx, merge);
}
