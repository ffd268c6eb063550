import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  BadRequest,
  BODY_LIMITS,
  decodeCursor,
  encodeCursor,
  Headers,
  NotFound,
  problemResponses,
  recordAudit,
  WORLD_ID,
} from '@onto/shared';
import { type Static, Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import type pg from 'pg';
import {
  CAUSED_BY_HEADER,
  checkPreconditions,
  keyParam,
  OBJECT_IF_MATCH,
  originOf,
  Pk,
  preconditionsOf,
  written,
} from '../http/requests.js';
import { At, LIST_COMMIT, NAME } from '../http/schemas.js';
import { objectAt } from '../objects/repository.js';
import { linkTypeOf, objectTypeOf } from '../schema/lookup.js';
import { inWorldTransaction } from '../worlds/locks.js';
import { pinnedRead } from '../worlds/refs.js';
import { type LinkChange, putLink, removeLink } from './change.js';
import { traverse } from './repository.js';

const errors = problemResponses(400, 401, 403, 404, 409, 412, 503);
/** Reads at a ref: also 410 before the retained horizon (docs/adr/0072). */
const readErrors = problemResponses(400, 401, 403, 404, 409, 410, 412, 503);
const LinkParams = Type.Object({
  world: Type.String({ pattern: WORLD_ID }),
  linkType: Type.String({ pattern: NAME, description: 'the link type (apiName)' }),
  fromPk: Pk("the primary key of the link type's `from` object"),
  toPk: Pk("the primary key of the link type's `to` object"),
});
const WriteHeaders = Type.Object({
  'if-match': Headers.ifMatch(OBJECT_IF_MATCH, 'the link version the write is based on, or *'),
  'if-none-match': Headers.ifNoneMatchAny(),
  'x-consistency-token': Headers.consistencyToken(),
  'x-caused-by': Headers.causedBy(CAUSED_BY_HEADER),
});
const End = Type.Object({ type: Type.String(), pk: Type.String() });
const LinkBody = Type.Object({ linkType: Type.String(), from: End, to: End, version: Type.Integer() });

/**
 * Links of a link type between existing objects. Cardinality is held by partial unique indexes
 * (race-free: of two concurrent creators one gets 409); a link keeps its ends alive by locking
 * them FOR KEY SHARE, so an object's delete — which deletes its links — waits for it, or it for
 * the delete.
 */
export default fp(
  async (fastify: FastifyInstance) => {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

    /**
     * A write of one link (PUT or DELETE): its keys checked, its preconditions and causal parent
     * read, the world's schema awaited, then `write` in the world's transaction.
     */
    async function writeLink<
      R extends { version: number; before: { version: number } | null; status?: number; changed?: boolean },
    >(
      request: FastifyRequest,
      params: Static<typeof LinkParams>,
      action: 'link.put' | 'link.delete',
      write: (app: FastifyInstance, tx: pg.PoolClient, change: LinkChange) => Promise<R>,
    ): Promise<R> {
      const { world, linkType: name, fromPk, toPk } = params;
      keyParam('fromPk', fromPk);
      keyParam('toPk', toPk);
      const origin = originOf(request);
      const conditions = preconditionsOf(request);
      await app.awaitSchemaConsistency(request, world);
      const what = `link ${name} ${fromPk} → ${toPk}`;
      return inWorldTransaction(app.pg, world, async (tx) => {
        const done = await write(app, tx, {
          worldId: world,
          linkType: name,
          fromPk,
          toPk,
          origin,
          topicPrefix: app.topicPrefix,
          check: (head) => checkPreconditions(conditions, head, what),
        });
        await recordAudit(tx, request, {
          action,
          result:
            action === 'link.delete'
              ? 'deleted'
              : done.changed === false
                ? 'unchanged'
                : done.status === 201
                  ? 'created'
                  : 'updated',
          worldId: world,
          subject: `${name}/${fromPk}/${toPk}`,
          beforeVersion: done.before?.version ?? null,
          afterVersion: done.version,
        });
        return done;
      });
    }

    app.put(
      '/v1/worlds/:world/links/:linkType/:fromPk/:toPk',
      {
        bodyLimit: BODY_LIMITS.object,
        preHandler: app.authorize({ role: 'editor' }),
        schema: {
          tags: ['links'],
          summary: 'Link two existing objects',
          description:
            "201 when created, 200 when the link already exists (nothing written, no change event; its audit record only, ADR 84). 409 when the link type's cardinality allows no other link on a side.",
          params: LinkParams,
          headers: WriteHeaders,
          response: { 200: LinkBody, 201: LinkBody, ...errors },
        },
      },
      async (request, reply) => {
        const result = await writeLink(request, request.params, 'link.put', putLink);
        written(reply, result.version, result.seq);
        reply.code(result.status);
        return { linkType: request.params.linkType, from: result.from, to: result.to, version: result.version };
      },
    );

    app.delete(
      '/v1/worlds/:world/links/:linkType/:fromPk/:toPk',
      {
        preHandler: app.authorize({ role: 'editor' }),
        schema: {
          tags: ['links'],
          summary: 'Delete a link',
          params: LinkParams,
          headers: WriteHeaders,
          response: { 204: Type.Null(), ...errors },
        },
      },
      async (request, reply) => {
        const result = await writeLink(request, request.params, 'link.delete', removeLink);
        written(reply, result.version, result.seq);
        reply.code(204);
        return null;
      },
    );

    app.get(
      '/v1/worlds/:world/objects/:type/:pk/links/:linkType',
      {
        preHandler: app.authorize({ role: 'viewer' }),
        schema: {
          tags: ['links'],
          summary: "An object's links of one link type, with the objects at their other end",
          description:
            'direction: outgoing (the object is the link type’s `from`) or incoming (its `to`); by default the side the object type is on (outgoing when it is both). Ordered by the other end’s primary key (as text), paginated with `next`. Every page reads one data commit, `commit` (without `at`, one cut for the first page): subscribe to the live events with `from=<commit>` to get exactly the changes after it.',
          params: Type.Object({
            world: Type.String({ pattern: WORLD_ID }),
            type: Type.String({ pattern: NAME }),
            pk: Pk('the primary key of the object'),
            linkType: Type.String({ pattern: NAME }),
          }),
          headers: Type.Object({ 'x-consistency-token': Headers.consistencyToken() }),
          querystring: Type.Object(
            {
              direction: Type.Optional(Type.Union([Type.Literal('outgoing'), Type.Literal('incoming')])),
              cursor: Type.Optional(Type.String({ maxLength: 4096 })),
              limit: Type.Integer({ minimum: 1, maximum: 1000, default: 100 }),
              at: At,
            },
            { additionalProperties: false },
          ),
          response: {
            200: Type.Object({
              linkType: Type.String(),
              direction: Type.String(),
              type: Type.String({ description: 'the object type at the other end' }),
              links: Type.Array(
                Type.Object({
                  pk: Type.String(),
                  linkVersion: Type.Integer(),
                  object: Type.Union([
                    Type.Object({
                      version: Type.Integer(),
                      properties: Type.Record(Type.String(), Type.Unknown()),
                    }),
                    Type.Null(),
                  ]),
                }),
              ),
              next: Type.Union([Type.String(), Type.Null()]),
              commit: LIST_COMMIT,
            }),
            ...readErrors,
          },
        },
      },
      async (request) => {
        const { world, type: typeName, pk, linkType: name } = request.params;
        keyParam('pk', pk);
        const { limit, at } = request.query;
        await app.awaitSchemaConsistency(request, world);
        // The cursor carries the commit its first page read, and is tied to its query.
        const cursor = decodeCursor(request.query.cursor, (c) =>
          c.q === `${typeName}/${pk}/${name}/${request.query.direction ?? ''}/${at ?? ''}` &&
          typeof c.p === 'string' &&
          (c.c === null || Number.isSafeInteger(c.c))
            ? { pk: c.p, commit: c.c as number | null }
            : undefined,
        );
        // A replica's own cut, else cut (or resolved) on the primary and read where that commit has
        // been replayed (docs/adr/0080, 0083).
        const { db, point } = await pinnedRead(app, request, world, {
          at,
          commit: cursor?.commit,
          commitField: 'querystring/cursor',
        });
        await objectTypeOf(app, db, world, typeName, point.schemaVersion);
        const { type } = await linkTypeOf(app, db, world, name, point.schemaVersion);
        const self = await objectAt(db, world, point.commit, typeName, pk);
        const direction = request.query.direction ?? (type.from === typeName ? 'outgoing' : 'incoming');
        if ((direction === 'outgoing' ? type.from : type.to) !== typeName) {
          throw new BadRequest(`${typeName} is not the ${direction === 'outgoing' ? 'from' : 'to'} of ${name}`, [
            {
              path: request.query.direction ? 'querystring/direction' : 'params/linkType',
              message: `${name} links ${type.from} to ${type.to}`,
            },
          ]);
        }
        if (!self || self.deleted) throw new NotFound(`${typeName} ${pk} does not exist in ${world}`);
        const after = cursor?.pk ?? null;
        const otherType = direction === 'outgoing' ? type.to : type.from;
        const rows = await traverse(db, {
          worldId: world,
          linkType: name,
          direction,
          pk,
          otherType,
          after,
          limit: limit + 1,
          // Up the chain at the commit the list reads (one cut for it when read now).
          chain: { commit: point.commit },
        });
        const page = rows.slice(0, limit);
        const last = page.at(-1);
        return {
          linkType: name,
          direction,
          type: otherType,
          links: page.map((r) => ({
            pk: r.pk,
            linkVersion: r.linkVersion,
            object: r.version === null ? null : { version: r.version, properties: r.properties ?? {} },
          })),
          next:
            rows.length > limit && last
              ? encodeCursor({
                  q: `${typeName}/${pk}/${name}/${request.query.direction ?? ''}/${at ?? ''}`,
                  c: point.commit,
                  p: last.pk,
                })
              : null,
          commit: point.commit,
        };
      },
    );
  },
  { name: 'onto-data-links', dependencies: ['onto-auth', 'onto-data-schema'] },
);
