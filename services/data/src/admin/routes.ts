import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { BODY_LIMITS, Outbox, type OutboxMessage, problemResponses, recordAudit, TOPICS, WORLD_ID } from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type pg from 'pg';
import { changeMessage, linkPk, type Origin } from '../events.js';
import { inWorldTransaction, originOf } from '../http.js';
import { linkTypeOf, notProvisioned, objectTypeOf } from '../schema/lookup.js';

/** Objects announced per transaction: a big type never makes one giant transaction. */
const ANNOUNCE_BATCH = 500;

const Recounted = Type.Object({
  world: Type.String(),
  type: Type.String(),
  count: Type.Integer({ description: 'live objects of the type in data' }),
  announced: Type.Integer({ description: 'object.announced events published' }),
});

const LinksRecounted = Type.Object({
  world: Type.String(),
  type: Type.String(),
  count: Type.Integer({ description: 'live links of the type in data' }),
  announced: Type.Integer({ description: 'link.announced events published' }),
});

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

/**
 * Operator repairs (onto-admin): `POST /v1/admin/worlds/{world}/object-types/{type}/recount`
 * counts the live objects of a type and re-announces each as `object.announced` with its current
 * version, so that a consumer that lost some (intelligence's read model) takes them again; one
 * that has the version already changes nothing. Only the world's own heads: a fork's inherited
 * objects are its base world's to announce. `…/link-types/{type}/recount` does the same for links
 * (`link.announced`).
 */
export default fp(
  async (fastify: FastifyInstance) => {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
    // The recount repairs (docs/adr/0032): every live object of a type, or link of a link type,
    // re-announced; every live one was announced, so the count is what was announced.
    const recounts = [
      { what: 'objects', kinds: 'object-types', response: Recounted, announce: announceObjects },
      { what: 'links', kinds: 'link-types', response: LinksRecounted, announce: announceLinks },
    ] as const;
    for (const { what, kinds, response, announce } of recounts) {
      const one = what.slice(0, -1);
      app.post(
        `/v1/admin/worlds/:world/${kinds}/:type/recount`,
        {
          bodyLimit: BODY_LIMITS.small,
          preHandler: app.authorize({ admin: true }),
          schema: {
            tags: ['admin'],
            summary: `Count the live ${what} of a${what === 'links' ? ' link' : 'n object'} type and re-announce them as ${one}.announced`,
            params: Type.Object({ world: Type.String({ pattern: WORLD_ID }), type: Type.String({ minLength: 1 }) }),
            response: { 200: response, ...problemResponses(400, 401, 403, 404, 409, 503) },
          },
        },
        async (request) => {
          const { world, type } = request.params;
          const announced = await announce(app, world, type, originOf(request), (tx, count) =>
            recordAudit(tx, request, {
              action: `admin.${what}.recount`,
              result: 'accepted',
              worldId: world,
              subject: type,
              detail: { announced: count },
            }),
          );
          return { world, type, count: announced, announced };
        },
      );
    }
  },
  { name: 'onto-data-admin' },
);
