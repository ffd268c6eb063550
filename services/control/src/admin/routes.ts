import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  BODY_LIMITS,
  inTransaction,
  NotFound,
  newEvent,
  Outbox,
  problemResponses,
  recordAudit,
  TOPICS,
  WORLD_ID,
} from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type pg from 'pg';
import { lockWorld } from '../worlds/repository.js';

const Republished = Type.Object({
  world: Type.String(),
  version: Type.Integer({ description: 'the schema version re-published' }),
  eventId: Type.String({ description: 'the new schema.updated event' }),
});

/**
 * Publishes the world's current schema once more as `schema.updated` (a new event id, the same
 * version), for a consumer that missed it: the admin route's and the checker's repair.
 */
export async function republishSchema(
  tx: pg.ClientBase,
  world: string,
  topicPrefix: string,
  requestId: string,
): Promise<{ version: number; eventId: string }> {
  await lockWorld(tx, world);
  const { rows } = await tx.query<{ version: number; document: unknown; diff: unknown; author: string }>(
    `SELECT version, document, diff, author FROM schema_versions
      WHERE world_id = $1 ORDER BY version DESC LIMIT 1`,
    [world],
  );
  const head = rows[0];
  if (!head) throw new NotFound(`world ${world} has no schema version yet: there is nothing to re-publish`);
  const event = newEvent({
    type: 'schema.updated',
    worldId: world,
    key: world,
    version: head.version,
    producer: 'control',
    producerSeq: head.version,
    payload: {
      version: head.version,
      previousVersion: head.version - 1,
      diff: head.diff,
      schema: head.document,
      author: head.author,
    },
  });
  await new Outbox(tx, topicPrefix).add({
    event,
    key: TOPICS['onto.schema'].key({ worldId: world }),
    headers: { 'x-request-id': requestId },
  });
  return { version: head.version, eventId: event.event_id };
}

/**
 * Operator repairs (onto-admin): `POST /v1/admin/worlds/{world}/schema/republish` publishes the
 * world's current schema once more as `schema.updated`, for a consumer that missed it; consumers
 * apply a schema by version, so one that has it already changes nothing.
 */
export default fp(
  async (fastify: FastifyInstance) => {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
    app.post(
      '/v1/admin/worlds/:world/schema/republish',
      {
        bodyLimit: BODY_LIMITS.small,
        preHandler: app.authorize({ admin: true }),
        schema: {
          tags: ['admin'],
          summary: "Re-publish a world's current schema as schema.updated",
          params: Type.Object({ world: Type.String({ pattern: WORLD_ID }) }),
          response: { 202: Republished, ...problemResponses(400, 401, 403, 404, 503) },
        },
      },
      async (request, reply) => {
        const { world } = request.params;
        const result = await inTransaction(app.pg, async (tx) => {
          const head = await republishSchema(tx, world, app.topicPrefix, request.id);
          await recordAudit(tx, request, {
            action: 'admin.schema.republish',
            result: 'accepted',
            worldId: world,
            afterVersion: head.version,
          });
          return { world, ...head };
        });
        reply.code(202);
        return result;
      },
    );
  },
  { name: 'onto-control-admin' },
);
