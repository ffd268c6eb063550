import { createHash } from 'node:crypto';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  BadRequest,
  BODY_LIMITS,
  decodeCursor,
  documentedJsonBody,
  encodeCursor,
  Headers,
  installBoundedJsonParser,
  NotFound,
  type ObjectType,
  problemResponses,
  recordAudit,
  Unprocessable,
  WORLD_ID,
} from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
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
import { notProvisioned, objectTypeOf } from '../schema/lookup.js';
import { latestSeries } from '../series/latest.js';
import { worldContext } from '../worlds/context.js';
import { inWorldTransaction } from '../worlds/locks.js';
import { pinnedRead, resolveRef } from '../worlds/refs.js';
import { deleteObject, ObjectWrites, type ObjectWritesOptions } from './change.js';
import { applyPatch, type Checked, checkObject, type Filter, parseFilter } from './model.js';
import { type Head, listObjects, objectAt, objectContext, objectHistory } from './repository.js';

const errors = problemResponses(400, 401, 403, 404, 409, 412, 413, 422, 503);
/** Reads at a ref: also 410 before the retained horizon (docs/adr/0072). */
const readErrors = problemResponses(400, 401, 403, 404, 409, 410, 412, 413, 422, 503);
const TypeParams = Type.Object({
  world: Type.String({ pattern: WORLD_ID }),
  type: Type.String({ pattern: NAME, description: 'the object type (apiName)' }),
});
const ObjectParams = Type.Object({
  world: Type.String({ pattern: WORLD_ID }),
  type: Type.String({ pattern: NAME }),
  pk: Pk(),
});
const ReadHeaders = Type.Object({
  'x-consistency-token': Headers.consistencyToken('control=<schema version>: wait (bounded) until data has applied it'),
});
const WriteHeaders = Type.Object({
  'if-match': Headers.ifMatch(OBJECT_IF_MATCH, 'the object version the write is based on, or *'),
  'if-none-match': Headers.ifNoneMatchAny(),
  'x-consistency-token': Headers.consistencyToken(),
  'x-caused-by': Headers.causedBy(CAUSED_BY_HEADER),
});
const Body = Type.Object(
  {
    properties: Type.Optional(
      Type.Unknown({ description: "the object's property values by name, checked against the world's schema" }),
    ),
  },
  {
    additionalProperties: true,
    description: '{"properties": {…}}; any fault is a 422 naming its JSON path (/properties/amount)',
  },
);
/** What a write's body must be (the route answers 422 otherwise): documented, checked by propertiesOf. */
const DocumentedBody = (values: string) =>
  Type.Object(
    {
      properties: Type.Record(Type.String({ minLength: 1 }), Type.Unknown(), {
        description: `the object's property values by name, checked against the world's schema; ${values}`,
      }),
    },
    { additionalProperties: false, description: 'any fault is a 422 naming its JSON path (/properties/amount)' },
  );
const ObjectBody = Type.Object({
  type: Type.String(),
  pk: Type.String(),
  version: Type.Integer(),
  properties: Type.Record(Type.String(), Type.Unknown()),
  series: Type.Optional(
    Type.Record(Type.String(), Type.Object({ time: Type.String(), value: Type.Unknown() }), {
      description: 'on a read: the latest point of each time series of the object',
    }),
  ),
});

type Params = { world: string; type: string; pk: string };

/** The `{"properties": …}` envelope of a write body: nothing else may be in it. */
function propertiesOf(body: unknown): unknown {
  const record = (body ?? {}) as Record<string, unknown>;
  const extra = Object.keys(record).filter((k) => k !== 'properties');
  if (extra.length > 0 || !('properties' in record)) {
    throw new Unprocessable('the body must be {"properties": {…}}', [
      ...extra.map((k) => ({
        path: `/${k.replaceAll('~', '~0').replaceAll('/', '~1')}`,
        message: 'is not a known field',
      })),
      ...(!('properties' in record) ? [{ path: '/properties', message: 'is required' }] : []),
    ]);
  }
  return record.properties;
}

/**
 * Objects of every world: `PUT|PATCH|GET|DELETE /v1/worlds/{world}/objects/{type}/{pk}` and the
 * list. Writes are checked against the world's replicated schema, conditional on If-Match
 * (the version is the ETag), and enqueue their change event in their own transaction.
 */
declare module 'fastify' {
  interface FastifyInstance {
    /** Single-object writes, committed alone or in groups (change.ts). */
    objectWrites: ObjectWrites;
  }
}

export default fp(
  async (fastify: FastifyInstance, opts: { groups?: ObjectWritesOptions }) => {
    fastify.decorate('objectWrites', new ObjectWrites(fastify, opts.groups ?? { inFlight: 2, maxGroup: 64 }));
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
    installBoundedJsonParser(app, 'application/merge-patch+json');

    /** A whole-object write (PUT, PATCH): `decide` turns the locked head into the new properties. */
    async function write(
      request: FastifyRequest,
      reply: FastifyReply,
      action: 'object.put' | 'object.patch',
      decide: (type: ObjectType, head: Head | null, params: Params) => Checked,
    ) {
      const params = request.params as Params;
      const { world, type: typeName, pk } = params;
      keyParam('pk', pk);
      const origin = originOf(request);
      const conditions = preconditionsOf(request);
      await app.awaitSchemaConsistency(request, world);
      // The write owns its transaction (two round trips), or shares one with the writes that
      // queued beside it (change.ts).
      const result = await app.objectWrites.write({
        worldId: world,
        typeName,
        pk,
        origin,
        topicPrefix: app.topicPrefix,
        check: (head) => checkPreconditions(conditions, head, `${typeName} ${pk}`),
        decide: (type, head) => decide(type, head, params),
        audit: { request, action },
      });
      written(reply, result.version, result.seq);
      if (result.status === 201) {
        reply.header('location', `/v1/worlds/${world}/objects/${typeName}/${encodeURIComponent(pk)}`);
      }
      reply.code(result.status);
      return { type: typeName, pk, version: result.version, properties: result.properties };
    }

    app.put(
      '/v1/worlds/:world/objects/:type/:pk',
      {
        bodyLimit: BODY_LIMITS.object,
        preHandler: app.authorize({ role: 'editor' }),
        schema: {
          tags: ['objects'],
          summary: 'Create or replace an object',
          description:
            'Answers 201 when created, 200 when replaced or unchanged (an identical PUT writes nothing and emits no change event, only its audit record: ADR 84). ETag: the version; X-Consistency-Token: data=<seq>.',
          params: ObjectParams,
          headers: WriteHeaders,
          body: Body,
          ...documentedJsonBody(DocumentedBody('every required property, the primary key equal to the path')),
          response: { 200: ObjectBody, 201: ObjectBody, ...errors },
        },
      },
      async (request, reply) => {
        const input = propertiesOf(request.body);
        return write(request, reply, 'object.put', (type, _head, { pk }) => checkObject(type, input, pk));
      },
    );

    app.patch(
      '/v1/worlds/:world/objects/:type/:pk',
      {
        bodyLimit: BODY_LIMITS.object,
        preHandler: app.authorize({ role: 'editor' }),
        schema: {
          tags: ['objects'],
          summary: 'Change some properties of an object',
          description:
            'A merge patch of the top-level properties: a value replaces the property, null removes it. The result is checked as a whole. application/json or application/merge-patch+json.',
          params: ObjectParams,
          headers: WriteHeaders,
          body: Body,
          'x-document-body': {
            required: true,
            content: Object.fromEntries(
              ['application/json', 'application/merge-patch+json'].map((media) => [
                media,
                { schema: DocumentedBody('a value replaces the property, null removes it') },
              ]),
            ),
          },
          response: { 200: ObjectBody, ...errors },
        },
      },
      async (request, reply) => {
        const patch = propertiesOf(request.body);
        return write(request, reply, 'object.patch', (type, head, { world, type: typeName, pk }) => {
          if (head === null || head.deleted) throw new NotFound(`${typeName} ${pk} does not exist in ${world}`);
          return applyPatch(type, head.properties ?? {}, patch, pk);
        });
      },
    );

    app.get(
      '/v1/worlds/:world/objects/:type/:pk',
      {
        preHandler: app.authorize({ role: 'viewer' }),
        schema: {
          tags: ['objects'],
          summary: 'Read an object',
          params: ObjectParams,
          headers: ReadHeaders,
          querystring: Type.Object({ at: At }, { additionalProperties: false }),
          response: { 200: ObjectBody, ...readErrors },
        },
      },
      async (request, reply) => {
        const { world, type: typeName, pk } = request.params;
        const { at } = request.query;
        keyParam('pk', pk);
        await app.awaitSchemaConsistency(request, world);
        let head: Head | null;
        let type: ObjectType;
        // Series are read up the chain in a fork and at a ref (docs/adr/0030); undefined: the world's own, now.
        let seriesAt: { commit: number | null } | undefined;
        // A replica that has what the request's token names (docs/adr/0080); a ref is resolved
        // against what the primary has.
        const db = await app.readDb(request, { primaryNow: at !== undefined });
        if (at === undefined) {
          const ctx = await objectContext(db, world, typeName, pk);
          if (!ctx.provisioned) throw notProvisioned(world);
          type = (await objectTypeOf(app, db, world, typeName, ctx.schemaVersion)).type;
          head = ctx.head;
          if (ctx.forked) seriesAt = { commit: null };
        } else {
          const point = await resolveRef(db, world, at);
          type = (await objectTypeOf(app, db, world, typeName, point.schemaVersion)).type;
          head = await objectAt(db, world, point.commit, typeName, pk);
          seriesAt = { commit: point.commit };
        }
        if (!head || head.deleted || !head.properties)
          throw new NotFound(`${typeName} ${pk} does not exist in ${world}`);
        written(reply, head.version, head.seq);
        const series = await latestSeries(db, world, type, pk, seriesAt);
        return { type: typeName, pk, version: head.version, properties: head.properties, ...(series && { series }) };
      },
    );

    app.get(
      '/v1/worlds/:world/objects/:type/:pk/history',
      {
        preHandler: app.authorize({ role: 'viewer' }),
        schema: {
          tags: ['objects'],
          summary: "An object's versions, newest first",
          description:
            "Every version the world sees, deletions included (properties null): its own, then, in a fork, its base's up to the fork point (`world` says which wrote it). `seq` is the data commit that wrote the version: read the object as it was with `?at=<seq>`.",
          params: ObjectParams,
          querystring: Type.Object(
            {
              cursor: Type.Optional(Type.String({ maxLength: 200 })),
              limit: Type.Integer({ minimum: 1, maximum: 1000, default: 50 }),
            },
            { additionalProperties: false },
          ),
          response: {
            200: Type.Object({
              versions: Type.Array(
                Type.Object({
                  version: Type.Integer(),
                  seq: Type.Integer(),
                  deleted: Type.Boolean(),
                  properties: Type.Union([Type.Record(Type.String(), Type.Unknown()), Type.Null()]),
                  schemaVersion: Type.Integer(),
                  actor: Type.String(),
                  writtenAt: Type.String(),
                  world: Type.String(),
                }),
              ),
              next: Type.Union([Type.String(), Type.Null()], { description: 'the cursor of the next page' }),
            }),
            ...errors,
          },
        },
      },
      async (request) => {
        const { world, type: typeName, pk } = request.params;
        const { cursor, limit } = request.query;
        keyParam('pk', pk);
        const before = decodeCursor(cursor, (c) =>
          c.h === 1 && Number.isSafeInteger(c.s) ? { seq: c.s as number } : undefined,
        );
        const ctx = await worldContext(app.pg, world);
        if (!ctx.provisioned) throw notProvisioned(world);
        await objectTypeOf(app, app.pg, world, typeName, ctx.schemaVersion);
        const rows = await objectHistory(app.pg, world, typeName, pk, before?.seq ?? null, limit + 1);
        if (rows.length === 0 && !before) throw new NotFound(`${typeName} ${pk} was never written in ${world}`);
        const page = rows.slice(0, limit);
        const last = page.at(-1);
        return { versions: page, next: rows.length > limit && last ? encodeCursor({ h: 1, s: last.seq }) : null };
      },
    );

    app.delete(
      '/v1/worlds/:world/objects/:type/:pk',
      {
        preHandler: app.authorize({ role: 'editor' }),
        schema: {
          tags: ['objects'],
          summary: 'Delete an object, and its links',
          description:
            'The links that touch the object are deleted in the same transaction, each with its link.deleted event. Answers 204; ETag is the tombstone version.',
          params: ObjectParams,
          headers: WriteHeaders,
          response: { 204: Type.Null(), ...errors },
        },
      },
      async (request, reply) => {
        const { world, type: typeName, pk } = request.params;
        keyParam('pk', pk);
        const origin = originOf(request);
        const conditions = preconditionsOf(request);
        await app.awaitSchemaConsistency(request, world);
        const result = await inWorldTransaction(app.pg, world, async (tx) => {
          const deleted = await deleteObject(app, tx, {
            worldId: world,
            typeName,
            pk,
            origin,
            topicPrefix: app.topicPrefix,
            check: (head) => checkPreconditions(conditions, head, `${typeName} ${pk}`),
          });
          await recordAudit(tx, request, {
            action: 'object.delete',
            result: 'deleted',
            worldId: world,
            subject: `${typeName}/${pk}`,
            beforeVersion: deleted.before.version,
            afterVersion: deleted.version,
            detail: deleted.removedLinks.length > 0 ? { removedLinks: deleted.removedLinks.length } : {},
          });
          return deleted;
        });
        written(reply, result.version, result.seq);
        reply.code(204);
        return null;
      },
    );

    app.get(
      '/v1/worlds/:world/objects/:type',
      {
        preHandler: app.authorize({ role: 'viewer' }),
        schema: {
          tags: ['objects'],
          summary: 'List objects of a type, filtered on indexed properties',
          description:
            'filter=<property>:<eq|gt|gte|lt|lte>:<value> (repeatable, indexed properties only; ranges on strings, numbers, timestamps, dates, enums). sort=<property> or -<property> (indexed, or the primary key; default the primary key, as text). Objects without the sort property come last (first when descending). Every page reads one data commit, `commit` (without `at`, one cut for the first page): subscribe to the live events with `from=<commit>` to get exactly the changes after the list.',
          params: TypeParams,
          headers: ReadHeaders,
          querystring: Type.Object(
            {
              filter: Type.Optional(
                Type.Array(
                  Type.String({
                    maxLength: 1100,
                    pattern: '^[^:]*:(?:eq|gt|gte|lt|lte):',
                    description:
                      '<property>:<eq|gt|gte|lt|lte>:<value>, on an indexed property of the type (only eq on a string, boolean or enum)',
                  }),
                  { maxItems: 20 },
                ),
              ),
              sort: Type.Optional(Type.String({ pattern: '^-?[A-Za-z][A-Za-z0-9_]{0,62}$' })),
              cursor: Type.Optional(Type.String({ maxLength: 4096 })),
              limit: Type.Integer({ minimum: 1, maximum: 1000, default: 100 }),
              at: At,
            },
            { additionalProperties: false },
          ),
          response: {
            200: Type.Object({
              objects: Type.Array(ObjectBody),
              next: Type.Union([Type.String(), Type.Null()], { description: 'the cursor of the next page' }),
              commit: LIST_COMMIT,
            }),
            ...readErrors,
          },
        },
      },
      async (request) => {
        const { world, type: typeName } = request.params;
        const { filter = [], sort, cursor, limit, at } = request.query;
        await app.awaitSchemaConsistency(request, world);
        // The cursor is tied to its query, and carries the commit its first page resolved.
        const query = createHash('sha256')
          .update(JSON.stringify([typeName, filter, sort ?? null, at ?? null]))
          .digest('base64url')
          .slice(0, 16);
        const after = decodeCursor(cursor, (c) =>
          c.q === query && typeof c.p === 'string' && 'k' in c && (c.c === null || Number.isSafeInteger(c.c))
            ? { value: c.k, pk: c.p, commit: c.c as number | null }
            : undefined,
        );
        // A replica's own cut, else cut (or resolved) on the primary and read where that commit has
        // been replayed (docs/adr/0080, 0083).
        const { db, point } = await pinnedRead(app, request, world, {
          at,
          commit: after?.commit,
          commitField: 'querystring/cursor',
        });
        const { type } = await objectTypeOf(app, db, world, typeName, point.schemaVersion);
        const filters: Filter[] = [];
        const faults = [];
        for (const [i, raw] of filter.entries()) {
          const parsed = parseFilter(type, raw);
          if ('error' in parsed) faults.push({ path: `querystring/filter/${i}`, message: parsed.error });
          else filters.push(parsed);
        }
        const descending = sort?.startsWith('-') ?? false;
        const sortName = sort?.replace(/^-/, '') ?? type.primaryKey;
        const sortProperty = sortName === type.primaryKey ? null : sortName;
        if (
          sortProperty !== null &&
          !(Object.hasOwn(type.properties, sortProperty) && type.properties[sortProperty]?.indexed)
        ) {
          faults.push({
            path: 'querystring/sort',
            message: `must be the primary key ${type.primaryKey} or an indexed property of ${typeName}`,
          });
        }
        if (faults.length > 0) throw new BadRequest('the listing cannot be made as asked', faults);
        const rows = await listObjects(db, {
          worldId: world,
          type: typeName,
          chain: point.chain,
          filters,
          sortProperty,
          descending,
          after,
          limit: limit + 1,
        });
        const page = rows.slice(0, limit);
        const last = page.at(-1);
        return {
          objects: page.map((r) => ({ type: typeName, pk: r.pk, version: r.version, properties: r.properties })),
          next:
            rows.length > limit && last
              ? encodeCursor({ q: query, c: point.commit, k: last.sortValue ?? null, p: last.pk })
              : null,
          commit: point.commit,
        };
      },
    );
  },
  { name: 'onto-data-objects', dependencies: ['onto-auth', 'onto-data-schema'] },
);
