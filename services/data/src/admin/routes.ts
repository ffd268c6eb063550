import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { BODY_LIMITS, problemResponses, recordAudit, WORLD_ID } from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { announceLinks, announceObjects } from '../checker/announce.js';
import { originOf } from '../http/requests.js';

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
