import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { NotFound, type Queryable, setOwn, Unprocessable, WORLD_ID } from '@onto/shared';
import { type Static, Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { listDerived, valuesOf } from '../derived/repository.js';
import { AtObject, NAME, notProvisioned, provisioned, ReadHeaders, readErrors } from '../http.js';

import { inheritedObject } from './chain.js';

const Params = Type.Object({
  world: Type.String({ pattern: WORLD_ID }),
  type: Type.String({ pattern: NAME, description: 'the object type (apiName)' }),
  pk: Type.String({ minLength: 1, maxLength: 1024, description: 'the primary key, URL-encoded' }),
});
const DerivedValue = Type.Object({
  value: Type.Unknown({ description: 'null while there is none, or when the evaluation failed' }),
  kind: Type.Union([Type.String(), Type.Null()], { description: 'the CEL kind: int, double, string, bool, list, …' }),
  error: Type.Union([Type.Object({ message: Type.String() }), Type.Null()]),
  computedAt: Type.Union([Type.String(), Type.Null()]),
  definitionVersion: Type.Union([Type.Integer(), Type.Null()]),
  sourceVersion: Type.Union([Type.Integer(), Type.Null()], {
    description: "the object's version it was computed from",
  }),
  sourceSeq: Type.Union([Type.Integer(), Type.Null()], {
    description: 'the highest data write among everything it read (the object, linked objects, links)',
  }),
  sources: Type.Union([Type.Record(Type.String(), Type.Unknown()), Type.Null()]),
  stale: Type.Boolean({
    description:
      'true while the value does not reflect the current definition: not computed yet, computed by an older definition or schema, or the definition is invalid',
  }),
  state: Type.Union([Type.Literal('valid'), Type.Literal('invalid')], { description: "the definition's state" }),
});
const Derived = Type.Record(Type.String(), DerivedValue);

/**
 * Reads of the read model: an object as intelligence knows it, with its derived values
 * (`GET /v1/worlds/{world}/objects/{type}/{pk}`), and the derived values alone (`…/derived`).
 */
export async function readModelRoutes(fastify: FastifyInstance) {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  /**
   * The world's own row and values; in a fork, for an object it has not written, its base's as
   * of the fork point, recursively (docs/adr/0033). The fork's own row, a tombstone too, decides.
   */
  async function find(db: Queryable, world: string, type: string, pk: string) {
    const { rows } = await db.query<{
      version: number | null;
      seq: number;
      deleted: boolean;
      properties: Record<string, unknown>;
      based: boolean;
    }>(
      `SELECT o.version::float8 AS version, o.seq::float8 AS seq, o.deleted, o.properties,
              EXISTS (SELECT 1 FROM world_bases WHERE world_id = $1) AS based
         FROM (SELECT 1) one
         LEFT JOIN rm_objects o ON o.world_id = $1 AND o.type = $2 AND o.pk = $3`,
      [world, type, pk],
    );
    const own = rows[0];
    if (own && own.version !== null) {
      if (own.deleted) return undefined;
      return { object: { ...own, version: own.version }, values: await valuesOf(db, world, type, pk) };
    }
    // A miss: in a fork (its commit recorded, or awaited), the chain decides.
    if (!own?.based && (await app.awaitBase(world)).kind === 'none') return undefined;
    return inheritedObject(db, world, type, pk);
  }

  async function read(db: Queryable, world: string, type: string, pk: string, at?: number) {
    const [found, definitions] = await Promise.all([
      at === undefined ? find(db, world, type, pk) : inheritedObject(db, world, type, pk, at),
      listDerived(db, world),
    ]);
    if (!found) {
      if (!(await provisioned(db, world))) throw notProvisioned(world);
      throw new NotFound(
        `${type} ${pk} is not in the read model of ${world}${at === undefined ? '' : ` at commit ${at}`}`,
      );
    }
    const { object, values } = found;
    const byName = new Map(values.map((v) => [v.name, v]));
    const derived: Record<string, unknown> = {};
    for (const def of definitions.filter((d) => d.objectType === type)) {
      const v = byName.get(def.name);
      const current = v?.current === true && def.version === v.definitionVersion;
      setOwn(derived, def.name, {
        value: v && v.error === null ? v.value : null,
        kind: v?.kind ?? null,
        error: v?.error ?? null,
        computedAt: v?.computedAt ?? null,
        definitionVersion: v?.definitionVersion ?? null,
        sourceVersion: v?.sourceVersion ?? null,
        sourceSeq: v?.sourceSeq ?? null,
        sources: v?.sources ?? null,
        stale: !current,
        state: def.state,
      });
    }
    return { object, derived };
  }

  /**
   * `read` once the request's consistency token is met and its ref resolved (on the primary),
   * from a replica that has all of that (docs/adr/0080); the answer carries the world's token.
   */
  async function readConsistent(
    request: FastifyRequest,
    reply: FastifyReply,
    { world, type, pk }: Static<typeof Params>,
    atText: string | undefined,
  ) {
    const waited = await app.awaitConsistency(request, world);
    let at: number | undefined;
    if (atText !== undefined) {
      if (!(await provisioned(app.pg, world))) throw notProvisioned(world);
      const point = await app.resolveAt(world, atText);
      at = point.commit;
      // A fork has no commits before its fork point (as data answers).
      const base = await app.awaitBase(world);
      if (base.kind === 'known' && at < base.seq) {
        throw new Unprocessable(
          `${world} was forked from ${base.world} at commit ${base.seq}: it has no commit ${at}`,
          [{ path: 'querystring/at', message: `must be at or after the fork point, ${base.seq}` }],
        );
      }
      // What intelligence held at n is known once it has applied the world's own data up to n.
      await app.awaitDataApplied(world, point.needs);
    }
    const { db, watermark } = await app.readModelDb(request, world, waited, { primaryNow: at !== undefined });
    const found = await read(db, world, type, pk, at);
    await app.consistencyHeader(reply, world, watermark);
    return found;
  }
  const At = Type.Object(
    {
      at: Type.Optional(AtObject),
    },
    { additionalProperties: false },
  );

  app.get(
    '/v1/worlds/:world/objects/:type/:pk',
    {
      preHandler: app.authorize({ role: 'viewer' }),
      schema: {
        tags: ['read model'],
        summary: "An object as intelligence's read model holds it, with its derived values",
        description:
          'X-Consistency-Token: data=<seq> (from a write in data) waits, bounded, until intelligence has applied data up to that write.',
        params: Params,
        headers: ReadHeaders,
        querystring: At,
        response: {
          200: Type.Object({
            type: Type.String(),
            pk: Type.String(),
            version: Type.Integer(),
            seq: Type.Integer({ description: "data's write sequence of this version" }),
            properties: Type.Record(Type.String(), Type.Unknown()),
            derived: Derived,
          }),
          ...readErrors,
        },
      },
    },
    async (request, reply) => {
      const { type, pk } = request.params;
      const { object, derived } = await readConsistent(request, reply, request.params, request.query.at);
      return { type, pk, version: object.version, seq: object.seq, properties: object.properties, derived };
    },
  );

  app.get(
    '/v1/worlds/:world/objects/:type/:pk/derived',
    {
      preHandler: app.authorize({ role: 'viewer' }),
      schema: {
        tags: ['read model'],
        summary: "An object's derived values, each with the source versions it was computed from",
        params: Params,
        headers: ReadHeaders,
        querystring: At,
        response: {
          200: Type.Object({ type: Type.String(), pk: Type.String(), version: Type.Integer(), derived: Derived }),
          ...readErrors,
        },
      },
    },
    async (request, reply) => {
      const { type, pk } = request.params;
      const { object, derived } = await readConsistent(request, reply, request.params, request.query.at);
      return { type, pk, version: object.version, derived };
    },
  );
}
