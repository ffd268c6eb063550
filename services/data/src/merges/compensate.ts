import type pg from 'pg';
import { lockWorldShared } from '../worlds/locks.js';
import { originOf, recordWritten } from './apply.js';
import type { State } from './classify.js';
import { loadItems, loadMerge, type StoredItem } from './items.js';
import { reply } from './reply.js';
import { type LinkPut, type ObjectPut, writeLinks, writeObjects } from './write.js';

/*
 * world.merge.compensate (docs/adr/0037 step 5, 0038): an applied merge is undone by writing
 * back, as ordinary writes with events, the states it replaced — only where the key still holds
 * the version the merge wrote; keys written since are left as they are and named (at most 200).
 * A merge not applied yet is marked compensated, so that a late apply does nothing.
 */

const NAMED = 200;

export async function compensateMerge(
  tx: pg.ClientBase,
  topicPrefix: string,
  causedBy: string,
  c: { merge: string; target: string },
): Promise<void> {
  const m = await loadMerge(tx, c.target, c.merge, true);
  const none = { objects: 0, links: 0 };
  if (m?.status !== 'applied') {
    // Not applied (or never planned here, its plan having failed): nothing of data's to undo,
    // and a late apply finds the merge compensated and does nothing.
    if (m?.status === 'planned') {
      await tx.query(`UPDATE merges SET status = 'compensated' WHERE world_id = $2 AND id = $1`, [m.id, m.target]);
    }
    return reply(tx, topicPrefix, m?.target ?? c.target, causedBy, 'merge.compensated', {
      merge: c.merge,
      reverted: none,
      notReverted: [],
    });
  }
  const items = (await loadItems(tx, m)).filter((i) => i.written_seq !== null);
  await lockWorldShared(tx, m.target);
  const objectItems = items.filter((i) => i.kind === 'object');
  const linkItems = items.filter((i) => i.kind === 'link');
  // The heads as they are now, locked: the merge's version still there, or written since.
  const { rows: heads } = await tx.query<{ type: string; pk: string; seq: string; properties: State }>(
    `SELECT h.type, h.pk, h.seq, h.properties FROM unnest($2::text[], $3::text[]) AS k(type, pk)
       JOIN object_heads h ON h.world_id = $1 AND h.type = k.type AND h.pk = k.pk
      ORDER BY h.type, h.pk FOR NO KEY UPDATE OF h`,
    [m.target, objectItems.map((i) => i.type), objectItems.map((i) => i.pk)],
  );
  const now = new Map(heads.map((h) => [`${h.type}\u0000${h.pk}`, h]));
  const { rows: linkHeads } = await tx.query<{ link_type: string; from_pk: string; to_pk: string; seq: string }>(
    `SELECT h.link_type, h.from_pk, h.to_pk, h.seq FROM unnest($2::text[], $3::text[], $4::text[]) AS k(lt, f, t)
       JOIN link_heads h ON h.world_id = $1 AND h.link_type = k.lt AND h.from_pk = k.f AND h.to_pk = k.t
      ORDER BY 1, 2, 3 FOR UPDATE OF h`,
    [m.target, linkItems.map((i) => i.type), linkItems.map((i) => i.pk), linkItems.map((i) => i.to_pk)],
  );
  const nowLinks = new Map(linkHeads.map((h) => [`${h.link_type}\u0000${h.from_pk}\u0000${h.to_pk}`, Number(h.seq)]));

  const notReverted: Record<string, unknown>[] = [];
  const leave = (i: StoredItem) => {
    if (notReverted.length >= NAMED) return;
    notReverted.push(
      i.kind === 'object'
        ? { kind: 'object', type: i.type, pk: i.pk }
        : { kind: 'link', linkType: i.type, from: i.pk, to: i.to_pk },
    );
  };
  const objects: ObjectPut[] = [];
  for (const i of objectItems) {
    const head = now.get(`${i.type}\u0000${i.pk}`);
    if (!head || Number(head.seq) !== Number(i.written_seq)) {
      leave(i);
      continue;
    }
    objects.push({
      n: i.n,
      type: i.type,
      pk: i.pk,
      expectSeq: Number(head.seq),
      readVersion: Number(i.written_version),
      before: head.properties,
      after: i.target as State,
    });
  }
  const links: LinkPut[] = [];
  for (const i of linkItems) {
    const seq = nowLinks.get(`${i.type}\u0000${i.pk}\u0000${i.to_pk}`);
    if (seq !== Number(i.written_seq)) {
      leave(i);
      continue;
    }
    const linkTypes = (m.schema as { linkTypes?: Record<string, { cardinality: string }> }).linkTypes ?? {};
    const type = Object.hasOwn(linkTypes, i.type) ? linkTypes[i.type] : undefined;
    links.push({
      n: i.n,
      linkType: i.type,
      fromPk: i.pk,
      toPk: i.to_pk,
      fromType: i.from_type ?? '',
      toType: i.to_type ?? '',
      expectSeq: seq,
      readVersion: Number(i.written_version),
      live: i.target === true,
      fromOne: type?.cardinality === 'ONE_TO_ONE',
      toOne: type !== undefined && type.cardinality !== 'MANY_TO_MANY',
    });
  }
  const origin = originOf(m);
  const schemaVersion = m.schema_version ?? 0;
  const o = await writeObjects(tx, m.target, objects, schemaVersion, origin, topicPrefix);
  const l = await writeLinks(tx, m.target, links, origin, topicPrefix);
  // The compensation's own writes replace the merge's in the record (a second one finds nothing to do).
  await recordWritten(tx, m, new Map([...o, ...l]));
  await tx.query(`UPDATE merges SET status = 'compensated' WHERE world_id = $2 AND id = $1`, [m.id, m.target]);
  await reply(tx, topicPrefix, m.target, causedBy, 'merge.compensated', {
    merge: m.id,
    reverted: { objects: objects.length, links: links.length },
    notReverted,
  });
}
