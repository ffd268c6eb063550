import { Outbox, type OutboxMessage, TOPICS } from '@onto/shared';
import type { FastifyInstance } from 'fastify';
import type pg from 'pg';
import { changeMessage, linkPk, type Origin } from '../events.js';
import { linkTypeOf, notProvisioned, objectTypeOf } from '../schema/lookup.js';
import { inWorldTransaction } from '../worlds/locks.js';

/** Objects announced per transaction: a big type never makes one giant transaction. */
const ANNOUNCE_BATCH = 500;

interface HeadRow {
  pk: string;
  version: string;
  seq: string;
  properties: Record<string, unknown>;
  schema_version: number;
}

/** The request's audit record, in the last page's transaction (see announcePages). */
type Last = (tx: pg.PoolClient, announced: number) => Promise<void>;

/**
 * The loop both announcers share: a transaction per page of ANNOUNCE_BATCH rows in keyset order,
 * each checking the world (and the type, by `checkType`) at the schema version it holds, reading
 * the page after `after` and enqueuing one event per row; answers how many rows were announced.
 */
async function announcePages<Row, Cursor>(
  app: FastifyInstance,
  world: string,
  first: Cursor,
  page: {
    checkType: (tx: pg.PoolClient, schemaVersion: number) => Promise<unknown>;
    read: (tx: pg.PoolClient, after: Cursor) => Promise<Row[]>;
    event: (row: Row) => OutboxMessage;
    next: (row: Row) => Cursor;
  },
  onLast?: Last,
): Promise<number> {
  let after = first;
  let announced = 0;
  for (;;) {
    const batch = await inWorldTransaction(app.pg, world, async (tx) => {
      const { rows: ctx } = await tx.query<{ provisioned: boolean; schema_version: number }>(
        `SELECT EXISTS (SELECT 1 FROM worlds WHERE id = $1) AS provisioned,
                (SELECT coalesce(max(version), 0) FROM schema_versions WHERE world_id = $1) AS schema_version`,
        [world],
      );
      if (!ctx[0]?.provisioned) throw notProvisioned(world);
      await page.checkType(tx, ctx[0].schema_version);
      const rows = await page.read(tx, after);
      if (rows.length > 0) await new Outbox(tx, app.topicPrefix).add(rows.map(page.event));
      if (rows.length < ANNOUNCE_BATCH) await onLast?.(tx, announced + rows.length);
      return rows;
    });
    announced += batch.length;
    const last = batch.at(-1);
    if (last === undefined || batch.length < ANNOUNCE_BATCH) return announced;
    after = page.next(last);
  }
}

/**
 * Re-announces each live object of a type as `object.announced` with its current version, in
 * transactions of ANNOUNCE_BATCH objects; answers how many. The admin recount's and the checker's
 * repair (objects.recount.requested).
 */
export function announceObjects(app: FastifyInstance, world: string, type: string, origin: Origin, last?: Last) {
  return announcePages<HeadRow, string>(
    app,
    world,
    '',
    {
      checkType: (tx, schemaVersion) => objectTypeOf(app, tx, world, type, schemaVersion),
      read: async (tx, after) =>
        (
          await tx.query<HeadRow>(
            `SELECT pk, version::text, seq::text, properties, schema_version FROM object_heads
            WHERE world_id = $1 AND type = $2 AND NOT deleted AND pk > $3
            ORDER BY pk LIMIT $4`,
            [world, type, after, ANNOUNCE_BATCH],
          )
        ).rows,
      event: (row) =>
        changeMessage(
          TOPICS['onto.changes.objects'].key({ worldId: world, objectType: type, pk: row.pk }),
          'object.announced',
          { worldId: world, version: Number(row.version), seq: Number(row.seq) },
          {
            type,
            pk: row.pk,
            version: Number(row.version),
            after: row.properties,
            actor: origin.actor,
            requestId: origin.requestId,
            schemaVersion: row.schema_version,
          },
          origin,
        ),
      next: (row) => row.pk,
    },
    last,
  );
}

interface LinkHeadRow {
  from_pk: string;
  to_pk: string;
  from_type: string;
  to_type: string;
  version: string;
  seq: string;
}

/**
 * Re-announces each live link of a link type as `link.announced` with its current version, in
 * transactions of ANNOUNCE_BATCH links; answers how many. The admin link recount's and the
 * checker's repair (links.recount.requested). Only the world's own link heads, as for objects.
 */
export function announceLinks(app: FastifyInstance, world: string, linkType: string, origin: Origin, last?: Last) {
  return announcePages<LinkHeadRow, { from: string; to: string }>(
    app,
    world,
    { from: '', to: '' },
    {
      checkType: (tx, schemaVersion) => linkTypeOf(app, tx, world, linkType, schemaVersion),
      read: async (tx, after) =>
        (
          await tx.query<LinkHeadRow>(
            `SELECT from_pk, to_pk, from_type, to_type, version::text, seq::text FROM link_heads
            WHERE world_id = $1 AND link_type = $2 AND NOT deleted AND (from_pk, to_pk) > ($3, $4)
            ORDER BY from_pk, to_pk LIMIT $5`,
            [world, linkType, after.from, after.to, ANNOUNCE_BATCH],
          )
        ).rows,
      event: (row) => {
        const pk = linkPk(row.from_pk, row.to_pk);
        return changeMessage(
          TOPICS['onto.changes.links'].key({ worldId: world, linkType, linkPk: pk }),
          'link.announced',
          { worldId: world, version: Number(row.version), seq: Number(row.seq) },
          {
            type: linkType,
            pk,
            from: { type: row.from_type, pk: row.from_pk },
            to: { type: row.to_type, pk: row.to_pk },
            version: Number(row.version),
            actor: origin.actor,
            requestId: origin.requestId,
          },
          origin,
        );
      },
      next: (row) => ({ from: row.from_pk, to: row.to_pk }),
    },
    last,
  );
}
