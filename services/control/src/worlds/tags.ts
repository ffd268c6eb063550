import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  actorOf,
  BODY_LIMITS,
  Conflict,
  eventReadings,
  inTransaction,
  NotFound,
  newEvent,
  Outbox,
  problemResponses,
  type ReceivedEvent,
  recordAudit,
  TOPICS,
  Unprocessable,
  uuidv7,
  WORLD_ID,
} from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type pg from 'pg';
import { currentSchema } from '../schema/repository.js';
import { NEW_TAG_NAME, TAG_NAME } from './refs.js';
import { lockWorld, lockWritableWorld } from './repository.js';

const errors = problemResponses(400, 401, 403, 404, 409, 422, 503);
const Ref = Type.Object(
  { control: Type.Integer({ minimum: 0, description: 'schema version' }) },
  { additionalProperties: false },
);
const Vector = Type.Object(
  {
    control: Type.Integer({ minimum: 0, description: 'the schema version the tag names' }),
    data: Type.Optional(
      Type.Integer({ description: "data's commit in the world when the tag was made: read at it with ?at=<data>" }),
    ),
    intelligence: Type.Optional(
      Type.Integer({ description: "intelligence's watermark in the world then: the newest data write it had applied" }),
    ),
  },
  { description: 'the point of each service the tag names; data and intelligence join once they replied' },
);
const Tag = Type.Object({
  world: Type.String(),
  name: Type.String(),
  status: Type.Union([Type.Literal('PENDING'), Type.Literal('COMPLETE')], {
    description:
      'PENDING until data and intelligence have replied with their positions (tags made before vectors: COMPLETE with control alone)',
  }),
  ref: Vector,
  createdBy: Type.String(),
  createdAt: Type.String(),
});
const TagParams = Type.Object({ world: Type.String({ pattern: WORLD_ID }), name: Type.String({ pattern: TAG_NAME }) });
const NewTagParams = Type.Object({
  world: Type.String({ pattern: WORLD_ID }),
  name: Type.String({
    pattern: NEW_TAG_NAME,
    description: 'a name that a fork ref can tell from a commit (all digits) and an instant',
  }),
});
const SELECT_TAG = `SELECT world_id AS world, name, status, ref, created_by AS "createdBy", to_json(created_at)#>>'{}' AS "createdAt" FROM world_tags`;

/** The replies to `world.tag.requested`, and the part of the vector each fills. */
const positioned = eventReadings<{ part: 'data' | 'intelligence'; tag: string; request: string; value: number }>({
  'world.tag.positioned': ({ payload: p }) => ({ part: 'data', tag: p.tag, request: p.request, value: p.commit }),
  'intelligence.world.tag.positioned': ({ payload: p }) => ({
    part: 'intelligence',
    tag: p.tag,
    request: p.request,
    value: p.dataSeq,
  }),
});

/**
 * Fills tags' vectors from data's and intelligence's replies (docs/adr/0029). A reply counts only
 * for the request it answers (a tag deleted and made again under the same name asks anew) and
 * only once: a part, once set, never changes, so a replayed reply is a no-op. The tag is COMPLETE
 * when both parts are in.
 */
export async function applyTagPositions(tx: pg.ClientBase, events: ReceivedEvent[]): Promise<void> {
  for (const { event } of events) {
    const position = positioned(event);
    if (!position) continue;
    await tx.query(
      `UPDATE world_tags
          SET ref = ref || jsonb_build_object($4::text, $5::bigint),
              status = CASE WHEN (ref || jsonb_build_object($4::text, $5::bigint)) ?& array['data', 'intelligence']
                            THEN 'COMPLETE' ELSE 'PENDING' END
        WHERE world_id = $1 AND name = $2 AND request_id = $3 AND NOT ref ? $4::text`,
      [event.world_id, position.tag, position.request, position.part, position.value],
    );
  }
}

/**
 * Tags name a point of a world's history: the vector {control, data, intelligence}. control's
 * part is the schema version; data's and intelligence's positions are asked for on Kafka
 * (`world.tag.requested`) and filled in as they reply: PENDING, then COMPLETE. Tags are immutable,
 * like git tags: the same tag again is a no-op, another schema version under an existing name is
 * a conflict (delete it first). A fork at a tag (`from.ref`) copies the tag's schema version and
 * forks data at the tag's data commit; data never prunes history, so what a tag names stays
 * readable for as long as the tag exists.
 */
export default fp(
  async (fastify: FastifyInstance) => {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

    app.put(
      '/v1/worlds/:world/tags/:name',
      {
        bodyLimit: BODY_LIMITS.small,
        preHandler: app.authorize({ role: 'editor' }),
        schema: {
          tags: ['worlds'],
          summary:
            "Name a point of the world: its schema version (the current one unless ref.control is given), data's commit and intelligence's watermark now",
          params: NewTagParams,
          body: Type.Object({ ref: Type.Optional(Ref) }, { additionalProperties: false }),
          response: { 200: Tag, 201: Tag, ...errors },
        },
      },
      async (request, reply) => {
        const { world, name } = request.params;
        const { status, tag } = await inTransaction(app.pg, async (tx) => {
          await lockWritableWorld(tx, world);
          const head = await currentSchema(tx, world);
          const ref = request.body.ref ?? { control: head.version };
          if (ref.control > head.version) {
            throw new Unprocessable(`world ${world} has no schema version ${ref.control}`, [
              { path: '/ref/control', message: `must be at most the current version ${head.version}` },
            ]);
          }
          const requestId = uuidv7();
          const inserted = await tx.query(
            `INSERT INTO world_tags (world_id, name, ref, created_by, status, request_id)
             VALUES ($1, $2, $3, $4, 'PENDING', $5)
             ON CONFLICT (world_id, name) DO NOTHING RETURNING name`,
            [world, name, ref, actorOf(request), requestId],
          );
          const tag = (await tx.query(`${SELECT_TAG} WHERE world_id = $1 AND name = $2`, [world, name])).rows[0];
          if (inserted.rowCount === 0 && tag.ref.control !== ref.control) {
            throw new Conflict(`tag ${name} of ${world} already names schema version ${tag.ref.control}`, {
              ref: tag.ref,
            });
          }
          await recordAudit(tx, request, {
            action: 'world.tag.create',
            result: inserted.rowCount === 0 ? 'unchanged' : 'created',
            worldId: world,
            subject: name,
            detail: { ref },
          });
          if (inserted.rowCount === 0) return { status: 200, tag };
          // data and intelligence read the request after every event of the world before it (one partition).
          const event = newEvent({
            type: 'world.tag.requested',
            worldId: world,
            key: world,
            version: 0,
            producer: 'control',
            producerSeq: 0,
            payload: { tag: name, request: requestId },
          });
          await new Outbox(tx, app.topicPrefix).add({ event, key: TOPICS['onto.worlds'].key({ worldId: world }) });
          return { status: 201, tag };
        });
        reply.code(status);
        return tag;
      },
    );

    app.get(
      '/v1/worlds/:world/tags',
      {
        preHandler: app.authorize({ role: 'viewer' }),
        schema: {
          tags: ['worlds'],
          params: Type.Object({ world: Type.String({ pattern: WORLD_ID }) }),
          response: { 200: Type.Object({ tags: Type.Array(Tag) }), ...errors },
        },
      },
      async (request) => {
        await inTransaction(app.pg, (tx) => lockWorld(tx, request.params.world));
        const { rows } = await app.pg.query(`${SELECT_TAG} WHERE world_id = $1 ORDER BY name`, [request.params.world]);
        return { tags: rows };
      },
    );

    app.get(
      '/v1/worlds/:world/tags/:name',
      {
        preHandler: app.authorize({ role: 'viewer' }),
        schema: { tags: ['worlds'], params: TagParams, response: { 200: Tag, ...errors } },
      },
      async (request) => {
        const { rows } = await app.pg.query(`${SELECT_TAG} WHERE world_id = $1 AND name = $2`, [
          request.params.world,
          request.params.name,
        ]);
        if (!rows[0]) throw new NotFound(`world ${request.params.world} has no tag ${request.params.name}`);
        return rows[0];
      },
    );

    app.delete(
      '/v1/worlds/:world/tags/:name',
      {
        preHandler: app.authorize({ role: 'owner' }),
        schema: { tags: ['worlds'], params: TagParams, response: { 204: Type.Null(), ...errors } },
      },
      async (request, reply) => {
        const { world, name } = request.params;
        await inTransaction(app.pg, async (tx) => {
          await lockWorld(tx, world);
          const { rows } = await tx.query<{ request: string | null }>(
            'DELETE FROM world_tags WHERE world_id = $1 AND name = $2 RETURNING request_id::text AS request',
            [world, name],
          );
          if (!rows[0]) throw new NotFound(`world ${world} has no tag ${name}`);
          await recordAudit(tx, request, {
            action: 'world.tag.delete',
            result: 'deleted',
            worldId: world,
            subject: name,
          });
          // data and intelligence resolve the tag's name in ?at= (docs/adr/0046): they forget it.
          // A tag made before vectors was never asked of them, and has no request.
          const made = rows[0].request;
          if (made) {
            const event = newEvent({
              type: 'world.tag.deleted',
              worldId: world,
              key: world,
              version: 0,
              producer: 'control',
              producerSeq: 0,
              payload: { tag: name, request: made },
            });
            await new Outbox(tx, app.topicPrefix).add({ event, key: TOPICS['onto.worlds'].key({ worldId: world }) });
          }
        });
        reply.code(204);
        return null;
      },
    );
  },
  { name: 'onto-control-tags', dependencies: ['onto-auth'] },
);
