import { canonicalJson } from '@onto/shared';
import type pg from 'pg';
import type { State } from './classify.js';
import { finalState, loadItems, loadMerge } from './items.js';
import { reply } from './reply.js';

/*
 * world.merge.stage.requested (docs/adr/0085): for a proposal's required checks, the objects the
 * stored plan would create or change in the target, as they would be after the merge — from the
 * plan's items and their conflicts' choices, as the apply would write them — replied as
 * merge.staged in chunks of at most 200 (one empty chunk when there are none). Nothing is written.
 */

const CHUNK = 200;

export async function stageMerge(
  tx: pg.ClientBase,
  topicPrefix: string,
  causedBy: string,
  r: { merge: string; target: string },
): Promise<void> {
  const m = await loadMerge(tx, r.target, r.merge);
  if (!m) return; // never planned here: control asks only for plans data reported
  const objects: { type: string; pk: string; properties: Record<string, unknown> }[] = [];
  for (const item of await loadItems(tx, m)) {
    if (item.kind !== 'object') continue;
    const final = finalState(item);
    if (!('state' in final) || final.state === null || final.state === true) continue;
    const target = item.target as State | true;
    if (target !== true && target !== null && canonicalJson(target) === canonicalJson(final.state)) continue;
    objects.push({ type: item.type, pk: item.pk, properties: final.state });
  }
  const chunks = Math.max(1, Math.ceil(objects.length / CHUNK));
  for (let chunk = 0; chunk < chunks; chunk++) {
    await reply(tx, topicPrefix, r.target, causedBy, 'merge.staged', {
      merge: r.merge,
      chunk,
      chunks,
      objects: objects.slice(chunk * CHUNK, (chunk + 1) * CHUNK),
    });
  }
}
