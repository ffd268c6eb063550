import { canonicalJson, ownValue } from '@onto/shared';
import type pg from 'pg';
import type { Origin } from '../events.js';
import { linksTouching } from '../links/repository.js';
import { checkObject } from '../objects/model.js';
import { lockWorldShared } from '../worlds/locks.js';
import { type State, sameState } from './classify.js';
import { finalState, loadItems, loadMerge, type MergeRow, personChose, type StoredItem } from './items.js';
import { schemaDocument } from './plan.js';
import { failed, reply } from './reply.js';
import { type LinkPut, Moved, type ObjectPut, writeLinks, writeObjects } from './write.js';

/*
 * world.merge.apply (docs/adr/0037 step 4, 0038): every planned change in one transaction (a
 * savepoint of the inbox transaction), as ordinary writes with their events, each conditional on
 * the target's head the plan read. A key written in the target since the plan rolls everything
 * back: merge.failed {phase: apply, status: 409} naming it. Writes are set-based (write.ts).
 */

/**
 * Whose the merged changes are: the merge's actor, `requestId merge:<id>`. They carry no
 * `caused_by`: their cause (control's world.merge.apply) is on a topic intelligence's change
 * consumer does not read, so it would park them waiting for a cause it can never see.
 */
export const originOf = (m: MergeRow): Origin => ({
  actor: m.actor,
  requestId: `merge:${m.id}`,
  causedBy: null,
});

/** The counts of an applied merge, from what its items recorded. */
const appliedCounts = (items: StoredItem[]) => ({
  objects: items.filter((i) => i.kind === 'object' && i.written_seq !== null).length,
  links: items.filter((i) => i.kind === 'link' && i.written_seq !== null).length,
});

export async function applyMerge(
  tx: pg.ClientBase,
  topicPrefix: string,
  causedBy: string,
  a: { merge: string; target: string; schemaVersion: number; schema: Record<string, unknown> },
): Promise<void> {
  const m = await loadMerge(tx, a.target, a.merge, true);
  if (!m) return; // not data's plan (never planned here): nothing to apply
  const fail = (status: number, reason: string, field?: string) =>
    failed(tx, topicPrefix, m.target, causedBy, {
      merge: m.id,
      phase: 'apply',
      status,
      reason,
      ...(field ? { field } : {}),
    });
  // A compensation asked before the apply: the merge is over, a late apply does nothing.
  if (m.status === 'compensated') return;
  const items = await loadItems(tx, m);
  if (m.status === 'applied') {
    // Applied already (an apply sent again): the same answer, nothing written twice.
    return reply(tx, topicPrefix, m.target, causedBy, 'merge.applied', {
      merge: m.id,
      target: Number(m.commit_seq),
      applied: appliedCounts(items),
    });
  }
  if (m.dry_run) return fail(409, 'a dry run is never applied');
  const schema = schemaDocument(a.schema);
  // The plan checked strategy-settled objects against the same document: checked again only
  // when the schema applied differs, or a person chose.
  const sameSchema = canonicalJson(a.schema) === canonicalJson(m.schema);
  const objects: ObjectPut[] = [];
  const links: LinkPut[] = [];
  for (const item of items) {
    const final = finalState(item);
    if ('open' in final) return fail(409, `conflict ${final.open} is not resolved`, `/conflicts/${final.open}`);
    if (item.kind === 'object') {
      const after = final.state as State;
      const before = item.target as State;
      if (sameState(after, before)) continue;
      if (after !== null && (!sameSchema || personChose(item))) {
        // Checked again against the schema the merge applies with (a person's value, a schema resolved since).
        const def = Object.hasOwn(schema.objectTypes, item.type) ? schema.objectTypes[item.type] : undefined;
        const errors = def ? checkObject(def, after, item.pk).errors : [{ path: '/', message: 'no such type' }];
        if (errors.length > 0) {
          return fail(
            422,
            `${item.type} ${item.pk} does not fit schema version ${a.schemaVersion}: ${errors.map((e) => `${e.path} ${e.message}`).join('; ')}`,
          );
        }
      }
      objects.push({
        n: item.n,
        type: item.type,
        pk: item.pk,
        expectSeq: item.target_seq === null ? null : Number(item.target_seq),
        readVersion: Number(item.target_version),
        before,
        after,
      });
    } else {
      const live = final.state === true;
      if (live === (item.target === true)) continue;
      const type = ownValue(schema.linkTypes, item.type);
      if (live && !type) return fail(422, `link type ${item.type} is not in schema version ${a.schemaVersion}`);
      links.push({
        n: item.n,
        linkType: item.type,
        fromPk: item.pk,
        toPk: item.to_pk,
        fromType: item.from_type ?? type?.from ?? '',
        toType: item.to_type ?? type?.to ?? '',
        expectSeq: item.target_seq === null ? null : Number(item.target_seq),
        readVersion: Number(item.target_version),
        live,
        fromOne: type?.cardinality === 'ONE_TO_ONE',
        toOne: type !== undefined && type.cardinality !== 'MANY_TO_MANY',
      });
    }
  }
  const origin = originOf(m);
  await tx.query('SAVEPOINT merge_apply');
  let written: Map<number, { seq: number; version: number }>;
  try {
    await lockWorldShared(tx, m.target);
    const o = await writeObjects(tx, m.target, objects, a.schemaVersion, origin, topicPrefix);
    const l = await writeLinks(tx, m.target, links, origin, topicPrefix);
    await refuseDanglingLinks(tx, m.target, objects, schema);
    written = new Map([...o, ...l]);
  } catch (error) {
    if (!(error instanceof Moved)) throw error;
    await tx.query('ROLLBACK TO SAVEPOINT merge_apply');
    return fail(409, `${error.message}: nothing of the merge was applied`);
  }
  await tx.query('RELEASE SAVEPOINT merge_apply');
  await recordWritten(tx, m, written);
  let commit = Number(m.target_seq);
  for (const w of written.values()) commit = Math.max(commit, w.seq);
  await tx.query(
    `UPDATE merges SET status = 'applied', schema_version = $2, commit_seq = $3, applied_at = now()
      WHERE world_id = $4 AND id = $1`,
    [m.id, a.schemaVersion, commit, m.target],
  );
  await reply(tx, topicPrefix, m.target, causedBy, 'merge.applied', {
    merge: m.id,
    target: commit,
    applied: { objects: objects.length, links: links.length },
  });
}

/** What the merge wrote, per item: what a compensation checks the heads against. */
export async function recordWritten(
  tx: pg.ClientBase,
  m: Pick<MergeRow, 'id' | 'target'>,
  written: Map<number, { seq: number; version: number }>,
): Promise<void> {
  if (written.size === 0) return;
  const ns = [...written.keys()];
  await tx.query(
    `UPDATE merge_items i SET written_version = w.version, written_seq = w.seq
       FROM unnest($2::int[], $3::bigint[], $4::bigint[]) AS w(n, version, seq)
      WHERE i.world_id = $5 AND i.merge_id = $1 AND i.n = w.n`,
    [m.id, ns, ns.map((n) => written.get(n)?.version), ns.map((n) => written.get(n)?.seq), m.target],
  );
}

/**
 * No link outlives its end (docs/adr/0023): once the merge's objects and links are written (the
 * deleted objects' heads locked, so no link to them can be made until commit), a live link of
 * the target still touching an object the merge deletes is one the plan did not see — made in
 * the target since — and the merge fails 409 rather than leave it dangling.
 */
async function refuseDanglingLinks(
  tx: pg.ClientBase,
  target: string,
  objects: ObjectPut[],
  schema: ReturnType<typeof schemaDocument>,
): Promise<void> {
  const deleted = objects.filter((o) => o.after === null && o.before !== null);
  if (deleted.length === 0) return;
  const { rows } = await tx.query<{ forked: boolean }>(
    'SELECT base_world IS NOT NULL AS forked FROM worlds WHERE id = $1',
    [target],
  );
  const forked = rows[0]?.forked ?? false;
  const linkTypes = Object.values(schema.linkTypes);
  for (const o of deleted) {
    const outgoing = linkTypes.filter((t) => t.from === o.type).map((t) => t.apiName);
    const incoming = linkTypes.filter((t) => t.to === o.type).map((t) => t.apiName);
    const [live] = await linksTouching(tx, target, { type: o.type, pk: o.pk }, outgoing, incoming, forked);
    if (live)
      throw new Moved(
        `link ${live.linkType} ${live.fromPk} → ${live.toPk} to ${o.type} ${o.pk}, which the merge deletes,`,
      );
  }
}
