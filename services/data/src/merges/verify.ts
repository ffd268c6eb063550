import type pg from 'pg';
import { type Choice, type State, sameState } from './classify.js';
import { computeMerge } from './compute.js';
import { choiceOf, loadMerge } from './items.js';
import { schemaDocument } from './plan.js';
import { keyOf, linksAt, objectsAt, pointOf } from './read.js';
import { failed, reply } from './reply.js';

/*
 * merge-verify (world.merge.verify.requested): the merge computed again from its recorded base,
 * source and target points with the recorded choices (strategy and persons), and each state it
 * decides compared with the target's at the merge commit.
 */

const SAMPLE = 50;

export async function verifyMerge(
  tx: pg.ClientBase,
  topicPrefix: string,
  causedBy: string,
  v: { merge: string; target: string; verification: string },
): Promise<void> {
  const m = await loadMerge(tx, v.target, v.merge);
  if (!m) return;
  if (m.status !== 'applied' || m.commit_seq === null) {
    return failed(tx, topicPrefix, m.target, causedBy, {
      merge: m.id,
      phase: 'verify',
      status: 409,
      reason: `the merge is ${m.status}, not applied: there is no merge commit to compare with`,
    });
  }
  const { rows } = await tx.query<{ id: string; take: string | null; value: unknown }>(
    'SELECT id, take, value FROM merge_conflicts WHERE world_id = $2 AND merge_id = $1',
    [m.id, m.target],
  );
  const recorded = new Map<string, Choice | null>(rows.map((r) => [r.id, choiceOf(r)]));
  const computed = await computeMerge(
    tx,
    {
      target: m.target,
      source: m.source,
      strategy: m.strategy,
      baseWorld: m.base_world,
      baseSeq: m.base_seq === null ? null : Number(m.base_seq),
      sourceSeq: Number(m.source_seq),
      targetSeq: Number(m.target_seq),
      schema: schemaDocument(m.schema),
      reverts: m.reverts,
    },
    recorded,
  );
  const commit = await pointOf(tx, m.target, Number(m.commit_seq));
  const objects = computed.items.filter((i) => i.kind === 'object');
  const links = computed.items.filter((i) => i.kind === 'link');
  const actualObjects = await objectsAt(tx, commit, objects);
  const actualLinks = await linksAt(
    tx,
    commit,
    links.map((l) => ({
      linkType: l.type,
      fromPk: l.pk,
      toPk: l.toPk,
      fromType: l.fromType ?? '',
      toType: l.toType ?? '',
    })),
  );
  const sample: { entity: Record<string, unknown>; expected: unknown; actual: unknown }[] = [];
  let differences = 0;
  for (const i of objects) {
    const actual = actualObjects.get(keyOf(i.type, i.pk))?.state ?? null;
    if (sameState(i.merged as State, actual)) continue;
    differences++;
    if (sample.length < SAMPLE) {
      sample.push({ entity: { kind: 'object', type: i.type, pk: i.pk }, expected: i.merged, actual });
    }
  }
  for (const i of links) {
    const actual = actualLinks.get(keyOf(i.type, i.pk, i.toPk))?.live ?? false;
    if (actual === (i.merged === true)) continue;
    differences++;
    if (sample.length < SAMPLE) {
      sample.push({
        entity: { kind: 'link', linkType: i.type, from: i.pk, to: i.toPk },
        expected: i.merged === true,
        actual,
      });
    }
  }
  await reply(tx, topicPrefix, m.target, causedBy, 'merge.verified', {
    merge: m.id,
    verification: v.verification,
    checked: computed.items.length,
    differences,
    sample,
  });
}
