import { copyField, copyLines, emptySchema, type SchemaDocument } from '@onto/shared';
import type pg from 'pg';
import type { Strategy } from './classify.js';
import { beforeMerge, type Computed, computeMerge, type MergeSpec } from './compute.js';
import { failed, reply } from './reply.js';

/*
 * world.merge.requested (docs/adr/0037 step 2, 0038): source and target read at one commit cut
 * now, the base where control says; the plan is stored (items with the target's head as read,
 * conflicts with how the strategy settled them) and reported: conflicts in chunks of at most 200,
 * then merge.planned.
 */

export interface MergeRequested {
  merge: string;
  source: string;
  target: string;
  strategy: Strategy;
  dryRun: boolean;
  base: { world: string; schemaVersion: number; dataSeq: number; definitions: number } | null;
  schema: Record<string, unknown>;
  actor: string;
  /** A revert (docs/adr/0081): the merge of the target it undoes. */
  reverts?: string;
}

export const schemaDocument = (raw: Record<string, unknown>): SchemaDocument => ({
  ...emptySchema(),
  ...(raw as Partial<SchemaDocument>),
});

const CHUNK = 200;
const json = (v: unknown) => (v === null || v === undefined ? '\\N' : copyField(JSON.stringify(v)));
const num = (v: number | null) => (v === null ? '\\N' : String(v));
const text = (v: string | null) => (v === null ? '\\N' : copyField(v));

/** Stores the computed plan: its items and conflicts by COPY (a merge can hold 100,000 of them). */
export async function storePlan(tx: pg.ClientBase, world: string, merge: string, computed: Computed): Promise<void> {
  const w = copyField(world);
  await copyLines(
    tx,
    'merge_items (world_id, merge_id, n, kind, type, pk, to_pk, from_type, to_type, base, source, target, target_seq, target_version, merged)',
    (function* () {
      for (const i of computed.items) {
        yield `${w}\t${merge}\t${i.n}\t${i.kind}\t${copyField(i.type)}\t${copyField(i.pk)}\t${copyField(i.toPk)}\t${text(i.fromType)}\t${text(i.toType)}\t${json(i.base)}\t${json(i.source)}\t${json(i.target)}\t${num(i.targetSeq)}\t${num(i.targetVersion ?? i.readVersion)}\t${json(i.merged)}\n`;
      }
    })(),
  );
  await copyLines(
    tx,
    'merge_conflicts (world_id, merge_id, id, item, type, property, body, take, value, resolved_by)',
    (function* () {
      for (const i of computed.items) {
        for (const c of i.conflicts) {
          const value = c.choice?.take === 'value' ? c.choice.value : null;
          yield `${w}\t${merge}\t${c.body.id}\t${i.n}\t${c.body.type}\t${text(c.property ?? null)}\t${json(c.body)}\t${text(c.choice?.take ?? null)}\t${json(value)}\t${text(c.by)}\n`;
        }
      }
    })(),
  );
}

/** Plans a merge in the inbox transaction; `cut` takes the commit source and target are read at. */
export async function planMerge(
  tx: pg.ClientBase,
  topicPrefix: string,
  causedBy: string,
  r: MergeRequested,
  cut: () => Promise<number>,
): Promise<void> {
  const known = await tx.query('SELECT 1 FROM merges WHERE world_id = $1 AND id = $2', [r.target, r.merge]);
  if (known.rowCount) return; // planned already (a request sent again): its replies went out then
  const refuse = (status: number, field: string, reason: string) =>
    failed(tx, topicPrefix, r.target, causedBy, { merge: r.merge, phase: 'plan', status, reason, field });
  const worlds = new Map(
    (
      await tx.query<{ id: string; created_seq: string }>('SELECT id, created_seq FROM worlds WHERE id = ANY($1)', [
        [r.source, r.target, r.base?.world ?? r.target],
      ])
    ).rows.map((w) => [w.id, Number(w.created_seq)]),
  );
  if (!worlds.has(r.target)) return refuse(404, '/target', `world ${r.target} is not provisioned in data`);
  if (!worlds.has(r.source)) return refuse(404, '/source', `world ${r.source} is not provisioned in data`);
  const seq = await cut();
  if (r.base !== null) {
    const created = worlds.get(r.base.world);
    if (created === undefined) {
      return refuse(422, '/base/world', `the merge base ${r.base.world} is not provisioned in data`);
    }
    if (r.base.dataSeq > seq) {
      return refuse(422, '/base/dataSeq', `the base's commit ${r.base.dataSeq} is ahead of data's head (${seq})`);
    }
    if (r.base.dataSeq < created) {
      return refuse(
        422,
        '/base/dataSeq',
        `the base's commit ${r.base.dataSeq} is before world ${r.base.world} existed (from ${created})`,
      );
    }
  }
  // A revert reads its source, the target, just before the merge it undoes (docs/adr/0081).
  let sourceSeq = seq;
  if (r.reverts !== undefined) {
    const before = await beforeMerge(tx, r.target, r.reverts);
    if (before === null) return refuse(404, '/reverts', `merge ${r.reverts} of ${r.target} is not known in data`);
    if (!('seq' in before)) {
      return refuse(409, '/reverts', `merge ${r.reverts} is ${before.status} in data, not applied: nothing to revert`);
    }
    sourceSeq = before.seq;
  }
  const spec: MergeSpec = {
    target: r.target,
    source: r.source,
    strategy: r.strategy,
    baseWorld: r.base?.world ?? null,
    baseSeq: r.base?.dataSeq ?? null,
    sourceSeq,
    targetSeq: seq,
    schema: schemaDocument(r.schema),
    reverts: r.reverts ?? null,
  };
  // The states of every candidate are sorted and hashed in memory, not spilled (for this transaction).
  await tx.query(`SET LOCAL work_mem = '64MB'`);
  const computed = await computeMerge(tx, spec);
  await tx.query(
    `INSERT INTO merges (world_id, id, target, source, strategy, dry_run, actor, base_world, base_seq, source_seq,
                         target_seq, status, schema, reverts)
     VALUES ($2, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'planned', $11, $12)`,
    [
      r.merge,
      r.target,
      r.source,
      r.strategy,
      r.dryRun,
      r.actor,
      spec.baseWorld,
      spec.baseSeq,
      sourceSeq,
      seq,
      r.schema,
      r.reverts ?? null,
    ],
  );
  await storePlan(tx, r.target, r.merge, computed);
  const bodies = computed.items.flatMap((i) => i.conflicts.map((c) => c.body));
  for (let at = 0; at < bodies.length; at += CHUNK) {
    await reply(tx, topicPrefix, r.target, causedBy, 'merge.conflicts.found', {
      merge: r.merge,
      conflicts: bodies.slice(at, at + CHUNK),
    });
  }
  await reply(tx, topicPrefix, r.target, causedBy, 'merge.planned', {
    merge: r.merge,
    source: sourceSeq,
    target: seq,
    changes: computed.changes,
    conflicts: bodies.length,
  });
}

/**
 * world.merge.conflict.resolved for one of data's conflicts: the person's choice replaces the
 * strategy's (control validated a value against the merged schema; the apply checks the result
 * again). A conflict of another service, or one data does not know, is not data's to record.
 */
export async function resolveConflict(
  tx: pg.ClientBase,
  r: { merge: string; target: string; conflict: string; take: 'source' | 'target' | 'value'; value?: unknown },
): Promise<void> {
  if (!r.conflict.startsWith('d-')) return;
  await tx.query(
    `UPDATE merge_conflicts SET take = $3, value = $4, resolved_by = 'person'
      WHERE world_id = $5 AND merge_id = $1 AND id = $2`,
    [r.merge, r.conflict, r.take, r.take === 'value' ? JSON.stringify(r.value ?? null) : null, r.target],
  );
}
