import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { BODY_LIMITS, Conflict, NotFound, problemResponses, recordAudit, WORLD_ID } from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { getDerived } from '../derived/repository.js';
import type { Engine } from '../engine/engine.js';
import { requestRecompute } from '../engine/recompute-jobs.js';
import { inWorld, NAME, notProvisioned, provisioned } from '../http.js';

const errors = problemResponses(400, 401, 403, 404, 409, 503);
const World = Type.String({ pattern: WORLD_ID });

/**
 * Operator repairs and checks (onto-admin): recompute a derived property for every object of its
 * type now, and count the read model's live objects of a type or links of a link type (to compare
 * with data's count).
 */
export async function adminRoutes(fastify: FastifyInstance, engine: Engine) {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  app.post(
    '/v1/admin/worlds/:world/derived-properties/:name/recompute',
    {
      bodyLimit: BODY_LIMITS.small,
      preHandler: app.authorize({ admin: true }),
      schema: {
        tags: ['admin'],
        summary: 'Recompute a derived property for every object of its type, due now',
        description: 'Progress: the recompute field of GET /v1/worlds/{world}/derived-properties/{name}.',
        params: Type.Object({ world: World, name: Type.String({ pattern: NAME }) }),
        response: {
          202: Type.Object({ world: Type.String(), name: Type.String(), objectType: Type.String() }),
          ...errors,
        },
      },
    },
    async (request, reply) => {
      const { world, name } = request.params;
      const def = await inWorld(app.pg, world, async (tx) => {
        const found = await getDerived(tx, world, name);
        if (!found) throw new NotFound(`derived property ${name} is not defined in ${world}`);
        if (found.state !== 'valid') {
          throw new Conflict(`derived property ${name} is invalid: fix its definition first`, {
            errors: found.errors,
          });
        }
        await requestRecompute(tx, {
          worldId: world,
          kind: 'derived',
          name,
          definitionVersion: found.version,
          objectType: found.objectType,
          dueInMs: 0,
        });
        await recordAudit(tx, request, {
          action: 'admin.derived.recompute',
          result: 'accepted',
          worldId: world,
          subject: name,
        });
        return found;
      });
      engine.worker.wake();
      reply.code(202);
      return { world, name, objectType: def.objectType };
    },
  );

  // What the checker's recounts compare with data's (docs/adr/0032): the read model's live
  // objects of a type, or links of a link type. Table and column are this code's own.
  const counts = [
    {
      kinds: 'object-types',
      what: 'objects of a type',
      sql: 'SELECT count(*)::int AS count FROM rm_objects WHERE world_id = $1 AND type = $2 AND NOT deleted',
    },
    {
      kinds: 'link-types',
      what: 'links of a link type',
      sql: 'SELECT count(*)::int AS count FROM rm_links WHERE world_id = $1 AND link_type = $2 AND NOT deleted',
    },
  ] as const;
  for (const { kinds, what, sql } of counts) {
    app.get(
      `/v1/admin/worlds/:world/${kinds}/:type/count`,
      {
        preHandler: app.authorize({ admin: true }),
        schema: {
          tags: ['admin'],
          summary: `The read model's live ${what}`,
          params: Type.Object({ world: World, type: Type.String({ pattern: NAME }) }),
          response: {
            200: Type.Object({ world: Type.String(), type: Type.String(), count: Type.Integer() }),
            ...errors,
          },
        },
      },
      async (request) => {
        const { world, type } = request.params;
        if (!(await provisioned(app.pg, world))) throw notProvisioned(world);
        const { rows } = await app.pg.query<{ count: number }>(sql, [world, type]);
        return { world, type, count: rows[0]?.count ?? 0 };
      },
    );
  }
}
