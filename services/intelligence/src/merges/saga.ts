/**
 * intelligence's steps of the merge saga (docs/adr/0037, 0039), one per event control sends on
 * onto.worlds, each in the consumer's inbox transaction with its reply: plan, record a
 * resolution, apply, compensate, verify.
 */
import { type EventEnvelope, type EventOf, HttpProblem, type SchemaDocument } from '@onto/shared';
import type pg from 'pg';
import type { DefinitionWriter } from '../definition-routes.js';
import { lockWorlds } from '../engine/locks.js';
import { provisioned } from '../http.js';
import { schemaDocument } from './check.js';
import { type Body, definitionsAt, type Kind, keyOf, positionOf, sameBody } from './history.js';
import { counts, type Entry, finalBody, planEntries, readPoints, writes } from './plan.js';
import { insertMerge, lockMerge, type Merge, type Replaced, reply, updateMerge } from './store.js';
import { type Write, writeAll } from './writes.js';

export interface SagaContext {
  topicPrefix: string;
  writers: Record<Kind, DefinitionWriter>;
  /** Runs once the transaction committed: wake the recompute worker, forget a deleted definition's metrics. */
  afterCommit: (work: () => void) => void;
}

const MAX_CONFLICTS_PER_EVENT = 200;

/** A step's own failure: replied as intelligence.merge.failed, its writes rolled back. */
class StepFailed extends Error {
  constructor(
    readonly status: number,
    reason: string,
    readonly field?: string,
  ) {
    super(reason);
  }
}

/**
 * Runs a step in a savepoint: a refusal (StepFailed, or a problem a definition write raised)
 * rolls back what the step wrote and is answered as failed in the phase; anything else is the
 * consumer's to retry.
 */
async function step(
  tx: pg.PoolClient,
  ctx: SagaContext,
  event: EventEnvelope,
  merge: string,
  phase: 'plan' | 'apply' | 'compensate' | 'verify',
  work: () => Promise<void>,
): Promise<void> {
  await tx.query('SAVEPOINT merge_step');
  try {
    await work();
    await tx.query('RELEASE SAVEPOINT merge_step');
  } catch (err) {
    if (!(err instanceof StepFailed) && !(err instanceof HttpProblem)) throw err;
    await tx.query('ROLLBACK TO SAVEPOINT merge_step');
    await reply(tx, ctx.topicPrefix, event, 'intelligence.merge.failed', {
      merge,
      phase,
      status: err.status,
      reason: err.message,
      ...(err instanceof StepFailed && err.field ? { field: err.field } : {}),
    });
  }
}

/** The plan's conflicts in events of at most 200, then the planned event. */
async function replyPlan(tx: pg.PoolClient, ctx: SagaContext, event: EventEnvelope, m: Merge) {
  const conflicts = m.entries
    .filter((e) => e.conflict)
    .map((e) => ({
      id: e.conflict?.id as string,
      type: 'RULE_CONFLICT',
      entity: { kind: e.kind, name: e.name },
      base: e.base,
      source: e.source,
      target: e.target,
      sourceAt: e.sourceAt,
      targetAt: e.targetAt,
      ...(e.conflict?.reason ? { reason: e.conflict.reason } : {}),
    }));
  for (let i = 0; i < conflicts.length; i += MAX_CONFLICTS_PER_EVENT) {
    await reply(tx, ctx.topicPrefix, event, 'intelligence.merge.conflicts.found', {
      merge: m.id,
      conflicts: conflicts.slice(i, i + MAX_CONFLICTS_PER_EVENT),
    });
  }
  await reply(tx, ctx.topicPrefix, event, 'intelligence.merge.planned', {
    merge: m.id,
    source: m.points.source.position,
    target: m.points.target.position,
    changes: counts(m.entries),
    conflicts: conflicts.length,
  });
}

export async function plan(
  tx: pg.PoolClient,
  ctx: SagaContext,
  event: EventOf<'world.merge.requested'>,
): Promise<void> {
  const p = event.payload;
  const known = await lockMerge(tx, p.target, p.merge);
  if (known) return replyPlan(tx, ctx, event, known); // asked again: the same answer
  await step(tx, ctx, event, p.merge, 'plan', async () => {
    for (const field of ['source', 'target'] as const) {
      if (!(await provisioned(tx, p[field]))) {
        throw new StepFailed(404, `world ${p[field]} is not provisioned in intelligence`, field);
      }
    }
    // No definition write of either world in flight: the positions read are complete.
    await lockWorlds(tx, [p.source, p.target]);
    const points = {
      base: p.base ? { world: p.base.world, position: p.base.definitions } : null,
      source: {
        world: p.source,
        position: p.reverts ? await beforeMerge(tx, p.target, p.reverts) : await positionOf(tx, p.source),
      },
      target: { world: p.target, position: await positionOf(tx, p.target) },
    };
    const sides = await readPoints(tx, points);
    const merge: Merge = {
      id: p.merge,
      source: p.source,
      target: p.target,
      strategy: p.strategy,
      dryRun: p.dryRun,
      points,
      schema: p.schema,
      entries: planEntries(sides.base, sides.source, sides.target, p.strategy, p.schema),
      status: 'planned',
      applied: null,
      appliedPosition: null,
      replaced: null,
    };
    await insertMerge(tx, merge);
    await replyPlan(tx, ctx, event, merge);
  });
}

/**
 * The position a revert reads its source at (docs/adr/0081): just before the first definition the
 * merge it undoes wrote. The apply held the target's lock, so no other definition of the target
 * was written between its writes; a merge that wrote none gives its own position after the apply.
 */
async function beforeMerge(tx: pg.PoolClient, world: string, reverted: string): Promise<number> {
  const m = await lockMerge(tx, world, reverted);
  if (!m) throw new StepFailed(404, `merge ${reverted} was never planned in intelligence`, 'reverts');
  if (m.status !== 'applied' || m.appliedPosition === null) {
    throw new StepFailed(409, `merge ${reverted} is ${m.status} in intelligence, not applied`, 'reverts');
  }
  const replaced = m.replaced ?? [];
  const { rows } = await tx.query<{ first: string | null }>(
    `SELECT min(last.seq) AS first
       FROM unnest($2::text[], $3::text[]) AS w(kind, name)
       CROSS JOIN LATERAL (
         SELECT h.seq FROM definition_history h
          WHERE h.world_id = $1 AND h.kind = w.kind AND h.name = w.name AND h.seq <= $4
          ORDER BY h.seq DESC LIMIT 1
       ) last`,
    [world, replaced.map((r) => r.kind), replaced.map((r) => r.name), m.appliedPosition],
  );
  const first = rows[0]?.first;
  return first === null || first === undefined ? m.appliedPosition : Number(first) - 1;
}

/** A person's resolution of one of intelligence's conflicts, kept for the apply (which checks a value as a PUT would). */
export async function resolve(tx: pg.PoolClient, event: EventOf<'world.merge.conflict.resolved'>): Promise<void> {
  const p = event.payload;
  if (!p.conflict.startsWith('i-')) return;
  const m = await lockMerge(tx, event.world_id, p.merge);
  const entry = m?.entries.find((e) => e.conflict?.id === p.conflict);
  if (!m || !entry || m.status !== 'planned') return;
  entry.resolution = { take: p.take, ...(p.take === 'value' ? { value: (p.value ?? null) as Body } : {}) };
  await updateMerge(tx, m, { entries: m.entries });
}

export async function apply(tx: pg.PoolClient, ctx: SagaContext, event: EventOf<'world.merge.apply'>): Promise<void> {
  const p = event.payload;
  await step(tx, ctx, event, p.merge, 'apply', async () => {
    const m = await lockMerge(tx, event.world_id, p.merge);
    if (!m) throw new StepFailed(404, `merge ${p.merge} was never planned in intelligence`);
    if (m.status === 'applied') {
      // Asked again: the same answer, nothing written twice.
      await reply(tx, ctx.topicPrefix, event, 'intelligence.merge.applied', {
        merge: m.id,
        target: m.appliedPosition ?? 0,
        applied: m.applied ?? {},
      });
      return;
    }
    if (m.status !== 'planned') throw new StepFailed(409, `the merge was ${m.status} before it applied`);
    if (m.dryRun) throw new StepFailed(409, 'a dry run applies nothing');
    const open = m.entries.filter((e) => finalBody(e) === undefined).map((e) => e.conflict?.id);
    if (open.length > 0) throw new StepFailed(409, `conflicts not resolved: ${open.join(', ')}`);
    await lockWorlds(tx, [m.target]);
    const writing = m.entries.filter(writes);
    // Conditional on the plan's reads: a definition written in the target since is a 409.
    for (const e of writing) {
      const now = (await ctx.writers[e.kind].version(tx, m.target, e.name)) ?? null;
      if (now !== e.targetVersion) {
        throw new StepFailed(
          409,
          `${e.kind} ${e.name} in ${m.target} is at version ${now ?? 'none'} since the plan read ${e.targetVersion ?? 'none'}`,
          `${e.kind}/${e.name}`,
        );
      }
    }
    const list: Write[] = writing.map((e) => ({ kind: e.kind, name: e.name, body: finalBody(e) ?? null }));
    const done = await writeAll(tx, ctx.writers, m.target, list, schemaDocument(p.schema) as SchemaDocument);
    if ('failed' in done) throw new StepFailed(done.failed.status, done.failed.reason, done.failed.field);
    const replaced: Replaced[] = writing.map((e) => ({
      kind: e.kind,
      name: e.name,
      before: e.target,
      beforeVersion: e.targetVersion,
      afterVersion: done.versions.get(keyOf(e.kind, e.name)) ?? null,
    }));
    const position = await positionOf(tx, m.target);
    // A value as stored, its defaults filled in: what verify compares the target with.
    const stored = await definitionsAt(tx, m.target, position);
    for (const e of writing) {
      if (e.resolution?.take === 'value') e.resolution.value = stored.get(keyOf(e.kind, e.name))?.body ?? undefined;
    }
    const applied = counts(writing);
    await updateMerge(tx, m, {
      status: 'applied',
      entries: m.entries,
      applied,
      appliedPosition: position,
      replaced,
    });
    ctx.afterCommit(() => {
      for (const w of list) ctx.writers[w.kind].committed(m.target, w.name, w.body === null);
    });
    await reply(tx, ctx.topicPrefix, event, 'intelligence.merge.applied', { merge: m.id, target: position, applied });
  });
}

export async function compensate(
  tx: pg.PoolClient,
  ctx: SagaContext,
  event: EventOf<'world.merge.compensate'>,
): Promise<void> {
  const p = event.payload;
  await step(tx, ctx, event, p.merge, 'compensate', async () => {
    const m = await lockMerge(tx, event.world_id, p.merge);
    const none = { merge: p.merge, reverted: { derived: 0, rules: 0, decisions: 0 }, notReverted: [] };
    if (m?.status !== 'applied') {
      // Not applied (yet): a late apply finds it cancelled and does nothing.
      if (m?.status === 'planned') await updateMerge(tx, m, { status: 'cancelled' });
      await reply(tx, ctx.topicPrefix, event, 'intelligence.merge.compensated', none);
      return;
    }
    await lockWorlds(tx, [m.target]);
    const back: Write[] = [];
    const notReverted: Record<string, unknown>[] = [];
    for (const r of m.replaced ?? []) {
      const now = (await ctx.writers[r.kind].version(tx, m.target, r.name)) ?? null;
      // Absent now and deleted by the merge: nobody wrote it since (a re-creation would have a version).
      if (now === r.afterVersion) back.push({ kind: r.kind, name: r.name, body: r.before });
      else notReverted.push({ kind: r.kind, name: r.name, version: now, mergeVersion: r.afterVersion });
    }
    const done = await writeAll(tx, ctx.writers, m.target, back);
    if ('failed' in done) throw new StepFailed(done.failed.status, done.failed.reason, done.failed.field);
    await updateMerge(tx, m, { status: 'compensated' });
    ctx.afterCommit(() => {
      for (const w of back) ctx.writers[w.kind].committed(m.target, w.name, w.body === null);
    });
    const reverted = counts(
      back.map((w) => ({ kind: w.kind }) as Entry),
      () => true,
    );
    await reply(tx, ctx.topicPrefix, event, 'intelligence.merge.compensated', {
      merge: m.id,
      reverted,
      notReverted: notReverted.slice(0, 200),
    });
  });
}

/**
 * merge-verify: the plan recomputed from the recorded points and the resolutions, each
 * definition it writes compared with the target's at the position after the merge.
 */
export async function verify(
  tx: pg.PoolClient,
  ctx: SagaContext,
  event: EventOf<'world.merge.verify.requested'>,
): Promise<void> {
  const p = event.payload;
  await step(tx, ctx, event, p.merge, 'verify', async () => {
    const m = await lockMerge(tx, event.world_id, p.merge);
    if (!m) throw new StepFailed(404, `merge ${p.merge} was never planned in intelligence`);
    if (m.status !== 'applied' || m.appliedPosition === null) {
      throw new StepFailed(409, `the merge is ${m.status}, not applied: there is nothing to verify`);
    }
    const sides = await readPoints(tx, m.points);
    const recomputed = planEntries(sides.base, sides.source, sides.target, m.strategy, m.schema);
    const resolutions = new Map(m.entries.flatMap((e) => (e.resolution ? [[e.conflict?.id, e.resolution]] : [])));
    for (const e of recomputed) {
      const r = e.conflict ? resolutions.get(e.conflict.id) : undefined;
      if (r) e.resolution = r;
    }
    const after = await definitionsAt(tx, m.target, m.appliedPosition);
    const expected = recomputed.filter(writes);
    const sample: { entity: Record<string, unknown>; expected: unknown; actual: unknown }[] = [];
    let differences = 0;
    for (const e of expected) {
      const want = finalBody(e) ?? null;
      const got = after.get(keyOf(e.kind, e.name))?.body ?? null;
      if (sameBody(want, got)) continue;
      differences++;
      if (sample.length < 50) sample.push({ entity: { kind: e.kind, name: e.name }, expected: want, actual: got });
    }
    await reply(tx, ctx.topicPrefix, event, 'intelligence.merge.verified', {
      merge: m.id,
      verification: p.verification,
      checked: expected.length,
      differences,
      sample,
    });
  });
}
