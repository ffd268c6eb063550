import { Conflict, NotFound, Outbox, StaleWriteError } from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import type pg from 'pg';
import { commitTime, linkChange, type Origin } from '../events.js';
import { linkTypeOf, notProvisioned } from '../schema/lookup.js';
import { worldContext } from '../worlds/context.js';
import { refuseProtected, type WriteVia } from '../worlds/protection.js';
import { type End, type LinkHead, linkHead, lockEnds, occupant, writeLink } from './repository.js';

/*
 * Link changes, decided and written, for every way in: REST and the steps of actions. Each runs
 * in the caller's transaction (which holds the world's drop lock shared) and adds its change
 * event to its outbox.
 */

/** Postgres' unique violation on the indexes that hold a side of a link type to one link. */
const CARDINALITY_INDEXES = new Set(['link_heads_one_per_from', 'link_heads_one_per_to']);

export interface LinkChange {
  worldId: string;
  linkType: string;
  fromPk: string;
  toPk: string;
  origin: Origin;
  topicPrefix: string;
  /** Checks the locked head (live, tombstone or none) before the write; throws to refuse. */
  check?: (head: LinkHead | null) => void;
  /** Who writes, for the world's protection (docs/adr/0058); a client's request when absent. */
  via?: WriteVia;
}

export interface LinkWritten {
  /** 201 when created (or revived), 200 when it already was live: nothing written, no event. */
  status: 200 | 201;
  changed: boolean;
  version: number;
  seq: number;
  from: End;
  to: End;
  before: LinkHead | null;
}

/**
 * Links two live objects (404 when an end does not exist; 409 when the link type's cardinality
 * allows no other link on a side). The ends are locked FOR KEY SHARE so that a concurrent delete
 * of one waits for the link, or the link for the delete.
 */
export async function putLink(app: FastifyInstance, tx: pg.PoolClient, c: LinkChange): Promise<LinkWritten> {
  const { worldId: world, linkType: name, fromPk, toPk, origin } = c;
  const ctx = await worldContext(tx, world);
  if (!ctx.provisioned) throw notProvisioned(world);
  refuseProtected(world, ctx.protection, c.via);
  const { type } = await linkTypeOf(app, tx, world, name, ctx.schemaVersion);
  const from = { type: type.from, pk: fromPk };
  const to = { type: type.to, pk: toPk };
  const forked = ctx.forked ?? false;
  const alive = await lockEnds(tx, world, from, to, forked);
  for (const [end, ok] of [
    [from, alive.from],
    [to, alive.to],
  ] as const) {
    if (!ok) throw new NotFound(`${end.type} ${end.pk} does not exist in ${world}`);
  }
  const fromOne = type.cardinality === 'ONE_TO_ONE';
  const toOne = type.cardinality !== 'MANY_TO_MANY';
  for (let attempt = 0; ; attempt++) {
    const head = await linkHead(tx, world, name, fromPk, toPk, true, forked);
    c.check?.(head);
    if (head && !head.deleted) {
      return { status: 200, changed: false, version: head.version, seq: head.seq, from, to, before: head };
    }
    for (const [side, one, pk] of [
      ['from', fromOne, fromPk],
      ['to', toOne, toPk],
    ] as const) {
      const taken = one ? await occupant(tx, world, name, side, pk, forked) : null;
      if (taken) {
        throw new Conflict(
          `${name} is ${type.cardinality}: ${side === 'from' ? type.from : type.to} ${pk} is already linked (${taken.fromPk} → ${taken.toPk})`,
          { existing: taken },
        );
      }
    }
    const version = (head?.version ?? 0) + 1;
    let seq: number | null;
    try {
      seq = await writeLink(tx, {
        worldId: world,
        linkType: name,
        from,
        to,
        fromOne,
        toOne,
        version,
        deleted: false,
        actor: origin.actor,
        requestId: origin.requestId,
      });
    } catch (error) {
      const e = error as { code?: string; constraint?: string };
      if (e.code === '23505' && e.constraint && CARDINALITY_INDEXES.has(e.constraint)) {
        throw new Conflict(`${name} is ${type.cardinality}: a concurrent request took the place of this link`);
      }
      throw error;
    }
    if (seq === null) {
      if (attempt < 3) continue;
      throw new StaleWriteError(`link ${world}/${name}/${fromPk}/${toPk} keeps changing`);
    }
    await new Outbox(tx, c.topicPrefix).add(
      linkChange(
        { worldId: world, linkType: name, from, to, kind: 'created', version, seq, writtenAt: await commitTime(tx) },
        origin,
      ),
    );
    return { status: 201, changed: true, version, seq, from, to, before: head };
  }
}

/** Deletes a live link (404 when there is none), with its `link.deleted` event. */
export async function removeLink(
  app: FastifyInstance,
  tx: pg.PoolClient,
  c: LinkChange,
): Promise<{ version: number; seq: number; before: LinkHead }> {
  const { worldId: world, linkType: name, fromPk, toPk, origin } = c;
  const ctx = await worldContext(tx, world);
  if (!ctx.provisioned) throw notProvisioned(world);
  refuseProtected(world, ctx.protection, c.via);
  const { type } = await linkTypeOf(app, tx, world, name, ctx.schemaVersion);
  const head = await linkHead(tx, world, name, fromPk, toPk, true, ctx.forked ?? false);
  if (!head || head.deleted) throw new NotFound(`link ${name} ${fromPk} → ${toPk} does not exist in ${world}`);
  c.check?.(head);
  const change = {
    worldId: world,
    linkType: name,
    from: { type: type.from, pk: fromPk },
    to: { type: type.to, pk: toPk },
    version: head.version + 1,
  };
  const seq = await writeLink(tx, {
    ...change,
    fromOne: false,
    toOne: false,
    deleted: true,
    actor: origin.actor,
    requestId: origin.requestId,
  });
  if (seq === null) throw new Error('a locked live link could not be deleted');
  await new Outbox(tx, c.topicPrefix).add(
    linkChange({ ...change, kind: 'deleted', seq, writtenAt: await commitTime(tx) }, origin),
  );
  return { version: change.version, seq, before: head };
}
