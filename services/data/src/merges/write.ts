import { copyField, copyLines, laneOf, Outbox, TOPICS, uuidv7 } from '@onto/shared';
import type pg from 'pg';
import { commitTime, linkChange, type Origin, objectChangeTemplate } from '../events.js';
import { writeLink } from '../links/repository.js';
import { HEAD_COPY, LOCK_HEADS, replaceHeads, takeSeqs } from '../objects/heads.js';
import type { State } from './classify.js';

/*
 * The set-based writes of a merge's apply and compensation (docs/adr/0038): many objects of one
 * target in a few statements, as bulk ingest writes them — heads locked and checked in one
 * statement, seqs taken in one, new heads by COPY, replaced heads by one UPDATE that keeps the
 * superseded versions in history, and the change events as outbox bundles.
 */

/** One object to write: its state to be, and the head it must still find (null: none of its own). */
export interface ObjectPut {
  n: number;
  type: string;
  pk: string;
  /** The target's own head the write expects (null: the world has no head of its own for the key). */
  expectSeq: number | null;
  /** The version the target read (own or inherited; 0: never written): the write is version + 1. */
  readVersion: number;
  before: State;
  after: State;
}

export interface LinkPut {
  n: number;
  linkType: string;
  fromPk: string;
  toPk: string;
  fromType: string;
  toType: string;
  expectSeq: number | null;
  readVersion: number;
  live: boolean;
  fromOne: boolean;
  toOne: boolean;
}

export class Moved extends Error {
  constructor(readonly key: string) {
    super(`${key} was written in the target since the merge read it`);
  }
}

const ORDER = (a: { type: string; pk: string }, b: { type: string; pk: string }) =>
  a.type === b.type ? (a.pk < b.pk ? -1 : a.pk > b.pk ? 1 : 0) : a.type < b.type ? -1 : 1;

/**
 * Locks the target's heads of the keys (in key order) and checks that each still is the head the
 * caller expects; throws Moved naming the first that is not. Then writes them all and adds their
 * events. Answers the seq each write took, by item n.
 */
export async function writeObjects(
  tx: pg.ClientBase,
  world: string,
  puts: ObjectPut[],
  schemaVersion: number,
  origin: Origin,
  topicPrefix: string,
): Promise<Map<number, { seq: number; version: number }>> {
  const out = new Map<number, { seq: number; version: number }>();
  if (puts.length === 0) return out;
  puts.sort(ORDER);
  await tx.query(LOCK_HEADS);
  const { rows: heads } = await tx.query<{ type: string; pk: string; seq: string }>(
    `SELECT h.type, h.pk, h.seq FROM unnest($2::text[], $3::text[]) AS k(type, pk)
       JOIN object_heads h ON h.world_id = $1 AND h.type = k.type AND h.pk = k.pk
      ORDER BY h.type, h.pk FOR NO KEY UPDATE OF h`,
    [world, puts.map((p) => p.type), puts.map((p) => p.pk)],
  );
  const found = new Map(heads.map((h) => [`${h.type}\u0000${h.pk}`, Number(h.seq)]));
  for (const p of puts) {
    if ((found.get(`${p.type}\u0000${p.pk}`) ?? null) !== p.expectSeq) throw new Moved(`${p.type} ${p.pk}`);
  }
  const seqs = await takeSeqs(tx, puts.length);
  puts.forEach((p, i) => {
    out.set(p.n, { seq: seqs[i] as number, version: p.readVersion + 1 });
  });
  const inserts = puts.filter((p) => p.expectSeq === null);
  const updates = puts.filter((p) => p.expectSeq !== null);
  const field = copyField;
  try {
    await copyLines(
      tx,
      HEAD_COPY,
      (function* () {
        for (const p of inserts) {
          const w = out.get(p.n) as { seq: number; version: number };
          const props = p.after === null ? '\\N' : field(JSON.stringify(p.after));
          yield `${field(world)}\t${field(p.type)}\t${field(p.pk)}\t${w.version}\t${w.seq}\t${p.after === null ? 't' : 'f'}\t${props}\t${schemaVersion}\t${field(origin.actor)}\t${field(origin.requestId)}\n`;
        }
      })(),
    );
  } catch (error) {
    // A head created since the locking read: the target moved.
    const { code } = error as { code?: string };
    if (code === '23505') throw new Moved('an object created in the target meanwhile');
    throw error;
  }
  if (updates.length > 0) {
    const list = JSON.stringify(
      updates.map((p) => {
        const w = out.get(p.n) as { seq: number; version: number };
        return { type: p.type, pk: p.pk, version: w.version, seq: w.seq, props: p.after };
      }),
    );
    const updated = await replaceHeads(
      tx,
      { worldId: world, schemaVersion, actor: origin.actor, requestId: origin.requestId },
      list,
    );
    if (updated !== updates.length) throw new Moved('an object of the target (its version moved)');
  }
  await objectEvents(tx, world, puts, out, schemaVersion, origin, topicPrefix);
  return out;
}

/** The change events of the writes, one bundle template per object type (as bulk ingest makes them). */
async function objectEvents(
  tx: pg.ClientBase,
  world: string,
  puts: ObjectPut[],
  written: Map<number, { seq: number; version: number }>,
  schemaVersion: number,
  origin: Origin,
  topicPrefix: string,
): Promise<void> {
  const keys = TOPICS['onto.changes.objects'];
  let at = 0;
  while (at < puts.length) {
    const type = (puts[at] as ObjectPut).type;
    const template = objectChangeTemplate(
      { worldId: world, type, schemaVersion, writtenAt: await commitTime(tx) },
      origin,
      new Date(),
    );
    const bundles = new Outbox(tx, topicPrefix).bundles({ sample: template.sample, parts: template.parts });
    for (; at < puts.length && (puts[at] as ObjectPut).type === type; at++) {
      const p = puts[at] as ObjectPut;
      const w = written.get(p.n) as { seq: number; version: number };
      const key = keys.key({ worldId: world, objectType: type, pk: p.pk });
      const kind = p.after === null ? 'deleted' : p.before === null ? 'created' : 'updated';
      const eventId = uuidv7();
      bundles.event(eventId, key, laneOf(key));
      const values: Record<string, string> = {
        eventId: `"${eventId}"`,
        key: JSON.stringify(key),
        kind: `"object.${kind}"`,
        version: String(w.version),
        seq: String(w.seq),
        pk: JSON.stringify(p.pk),
        before: JSON.stringify(p.before),
        after: JSON.stringify(p.after),
      };
      for (const f of template.fields) bundles.value(values[f] as string);
    }
    await bundles.write();
  }
}

/**
 * The links: heads locked and checked in one statement, then written one by one (a merge moves
 * few links; the to-one places are kept by the partial unique indexes, a violation is Moved).
 */
export async function writeLinks(
  tx: pg.ClientBase,
  world: string,
  puts: LinkPut[],
  origin: Origin,
  topicPrefix: string,
): Promise<Map<number, { seq: number; version: number }>> {
  const out = new Map<number, { seq: number; version: number }>();
  if (puts.length === 0) return out;
  const { rows } = await tx.query<{ link_type: string; from_pk: string; to_pk: string; seq: string }>(
    `SELECT h.link_type, h.from_pk, h.to_pk, h.seq FROM unnest($2::text[], $3::text[], $4::text[]) AS k(lt, f, t)
       JOIN link_heads h ON h.world_id = $1 AND h.link_type = k.lt AND h.from_pk = k.f AND h.to_pk = k.t
      ORDER BY 1, 2, 3 FOR UPDATE OF h`,
    [world, puts.map((p) => p.linkType), puts.map((p) => p.fromPk), puts.map((p) => p.toPk)],
  );
  const found = new Map(rows.map((r) => [`${r.link_type}\u0000${r.from_pk}\u0000${r.to_pk}`, Number(r.seq)]));
  const writtenAt = await commitTime(tx);
  for (const p of puts) {
    if ((found.get(`${p.linkType}\u0000${p.fromPk}\u0000${p.toPk}`) ?? null) !== p.expectSeq) {
      throw new Moved(`link ${p.linkType} ${p.fromPk} → ${p.toPk}`);
    }
  }
  for (const p of puts) {
    const from = { type: p.fromType, pk: p.fromPk };
    const to = { type: p.toType, pk: p.toPk };
    const version = p.readVersion + 1;
    let seq: number | null;
    try {
      seq = await writeLink(tx, {
        worldId: world,
        linkType: p.linkType,
        from,
        to,
        fromOne: p.live && p.fromOne,
        toOne: p.live && p.toOne,
        version,
        deleted: !p.live,
        actor: origin.actor,
        requestId: origin.requestId,
      });
    } catch (error) {
      if ((error as { code?: string }).code === '23505') {
        throw new Moved(`link ${p.linkType} ${p.fromPk} → ${p.toPk} (its to-one place is taken in the target)`);
      }
      throw error;
    }
    if (seq === null) throw new Moved(`link ${p.linkType} ${p.fromPk} → ${p.toPk}`);
    out.set(p.n, { seq: Number(seq), version });
    await new Outbox(tx, topicPrefix).add(
      linkChange(
        {
          worldId: world,
          linkType: p.linkType,
          from,
          to,
          kind: p.live ? 'created' : 'deleted',
          version,
          seq: Number(seq),
          writtenAt,
        },
        origin,
      ),
    );
  }
  return out;
}
