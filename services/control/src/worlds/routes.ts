import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  actorOf,
  BODY_LIMITS,
  Conflict,
  Forbidden,
  HttpProblem,
  inTransaction,
  NotFound,
  newEvent,
  Outbox,
  problemResponses,
  recordAudit,
  TOPICS,
  Unprocessable,
  WORLD_ID,
} from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import type pg from 'pg';
import { grantRole } from '../identity/roles.js';
import { emptySchema } from '../schema/model.js';
import { writeVersion } from '../schema/repository.js';
import { type ForkPoint, forkPoint } from './refs.js';
import { WORLD_STATUSES } from './repository.js';
import { applyDefaultRetention, HistoryHorizon, type RetentionDefaults } from './retention.js';

const errors = problemResponses(400, 401, 403, 404, 409, 422, 503);
const WorldParams = Type.Object({ world: Type.String({ pattern: WORLD_ID }) });
const World = Type.Object({
  id: Type.String(),
  status: Type.Union(WORLD_STATUSES.map((s) => Type.Literal(s))),
  from: Type.Union([
    Type.Object({
      world: Type.String(),
      ref: Type.Union([Type.String(), Type.Null()], { description: 'the ref asked for; null = when forked' }),
      commit: Type.Union([Type.Integer(), Type.Null()], {
        description: "data's commit the fork starts from, once data has reported it",
      }),
      schemaVersion: Type.Integer({ description: "the base's schema version copied" }),
    }),
    Type.Null(),
  ]),
  createdBy: Type.String(),
  createdAt: Type.String(),
  updatedAt: Type.String(),
  confirmedBy: Type.Array(Type.String()),
  failure: Type.Union([
    Type.Object({
      field: Type.Union([Type.String(), Type.Null()], { description: 'the request field at fault, if any' }),
      reason: Type.String(),
    }),
    Type.Null(),
  ]),
  historyHorizon: HistoryHorizon,
});
const CreateWorld = Type.Object(
  {
    id: Type.String({
      pattern: WORLD_ID,
      description: 'a slug: a lowercase letter, then lowercase letters, digits or -',
    }),
    from: Type.Optional(
      Type.Object(
        {
          world: Type.String({ pattern: WORLD_ID }),
          ref: Type.Optional(
            Type.String({
              minLength: 1,
              maxLength: 100,
              description: 'where to fork: a data commit (digits), an RFC 3339 instant or a tag name; now by default',
            }),
          ),
        },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false },
);

/** The services that must provision a world before it is READY, and drop it before DELETED. */
export const PROVISIONERS = ['data', 'intelligence'] as const;

const SELECT_WORLD = `SELECT id, status,
  CASE WHEN parent_world IS NULL THEN NULL ELSE json_build_object('world', parent_world, 'ref', parent_ref,
    'commit', parent_commit, 'schemaVersion', parent_schema_version) END AS "from",
  created_by AS "createdBy", to_json(created_at)#>>'{}' AS "createdAt", to_json(updated_at)#>>'{}' AS "updatedAt",
  confirmed_by AS "confirmedBy",
  CASE WHEN failure IS NULL THEN NULL ELSE json_build_object('field', failure_field, 'reason', failure) END AS failure,
  (SELECT json_build_object('commit', h.horizon_seq, 'movedAt', to_json(h.moved_at)#>>'{}')
     FROM world_horizons h WHERE h.world_id = worlds.id) AS "historyHorizon"
  FROM worlds`;

function worldEvent(
  type: 'world.created' | 'world.deleted' | 'world.drop.requested',
  worldId: string,
  payload: Record<string, unknown>,
) {
  return {
    event: newEvent({ type, worldId, key: worldId, version: 0, producer: 'control', producerSeq: 0, payload }),
    key: TOPICS['onto.worlds'].key({ worldId }),
  };
}

/**
 * Worlds: metadata strongly consistent here, the lifecycle a saga over events. A new world is
 * PROVISIONING until data and intelligence report it provisioned (READY), or FAILED after the
 * timeout, when those that did provision it are told to drop it. Deleting is DELETING until both
 * report it dropped (DELETED).
 */
export default fp(
  async (fastify: FastifyInstance, opts: { provisionTimeoutMs: number; retention: RetentionDefaults }) => {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

    app.post(
      '/v1/worlds',
      {
        bodyLimit: BODY_LIMITS.small,
        preHandler: app.authorize({ authenticated: true }),
        schema: { tags: ['worlds'], body: CreateWorld, response: { 202: World, ...errors } },
      },
      async (request, reply) => {
        const { id, from } = request.body;
        const world = await inTransaction(app.pg, async (tx) => {
          const fork = from ? await checkFork(tx, request, id, from) : null;
          const inserted = await tx.query(
            `INSERT INTO worlds (id, status, parent_world, parent_ref, parent_schema_version, created_by, deadline_at)
             VALUES ($1, 'PROVISIONING', $2, $3, $4, $5, now() + make_interval(secs => $6::float8 / 1000))
             ON CONFLICT (id) DO NOTHING RETURNING id`,
            [
              id,
              from?.world ?? null,
              from?.ref ?? null,
              fork?.schema.version ?? null,
              actorOf(request),
              opts.provisionTimeoutMs,
            ],
          );
          if (inserted.rowCount === 0) throw new Conflict(`world ${id} already exists`);
          if (fork && fork.schema.version > 0) {
            await writeVersion(tx, {
              worldId: id,
              author: actorOf(request),
              requestId: request.id,
              before: { version: 0, document: emptySchema() },
              after: fork.schema.document,
              topicPrefix: app.topicPrefix,
            });
          }
          await grantRole(tx, { userId: actorOf(request), worldId: id, role: 'owner', topicPrefix: app.topicPrefix });
          await new Outbox(tx, app.topicPrefix).add({
            ...worldEvent('world.created', id, {
              from:
                from && fork
                  ? { world: from.world, schemaVersion: fork.schema.version, ...(fork.ref ? { ref: fork.ref } : {}) }
                  : null,
              createdBy: actorOf(request),
            }),
            headers: { 'x-request-id': request.id },
          });
          // After world.created on the world's partition: data knows the world when the policy arrives.
          await applyDefaultRetention(tx, app.topicPrefix, id, opts.retention, actorOf(request));
          await recordAudit(tx, request, {
            action: 'world.create',
            result: 'accepted',
            worldId: id,
            detail: { from: from ?? null },
          });
          return (await tx.query(`${SELECT_WORLD} WHERE id = $1`, [id])).rows[0];
        });
        reply.code(202).header('location', `/v1/worlds/${id}`);
        return world;
      },
    );

    app.get(
      '/v1/worlds',
      {
        preHandler: app.authorize({ authenticated: true }),
        schema: {
          tags: ['worlds'],
          querystring: Type.Object({ status: Type.Optional(Type.Union(WORLD_STATUSES.map((s) => Type.Literal(s)))) }),
          response: { 200: Type.Object({ worlds: Type.Array(World) }), ...errors },
        },
      },
      async (request) => {
        const principal = request.principal;
        const { rows } = await app.pg.query(
          `${SELECT_WORLD} WHERE ($1::text IS NULL AND status <> 'DELETED' OR status = $1)
             AND ($2 OR id = ANY($3::text[])) ORDER BY id`,
          [request.query.status ?? null, principal?.admin ?? false, Object.keys(principal?.roles ?? {})],
        );
        return { worlds: rows };
      },
    );

    app.get(
      '/v1/worlds/:world',
      {
        preHandler: app.authorize({ role: 'viewer' }),
        schema: { tags: ['worlds'], params: WorldParams, response: { 200: World, ...errors } },
      },
      async (request) => {
        const { rows } = await app.pg.query(`${SELECT_WORLD} WHERE id = $1`, [request.params.world]);
        if (!rows[0]) throw new NotFound(`world ${request.params.world} does not exist`);
        return rows[0];
      },
    );

    app.delete(
      '/v1/worlds/:world',
      {
        preHandler: app.authorize({ role: 'owner' }),
        schema: { tags: ['worlds'], params: WorldParams, response: { 202: World, ...errors } },
      },
      async (request, reply) => {
        const { world } = request.params;
        const row = await inTransaction(app.pg, async (tx) => {
          // FOR UPDATE, not SHARE: a fork of this world (which locks it FOR SHARE) either commits
          // first and is seen below as a child, or waits and then finds the world DELETING.
          const { rows: locked } = await tx.query<{ status: string }>(
            'SELECT status FROM worlds WHERE id = $1 FOR UPDATE',
            [world],
          );
          const status = locked[0]?.status;
          if (!status || status === 'DELETED') throw new NotFound(`world ${world} does not exist`);
          if (status === 'DELETING')
            throw new Conflict(`world ${world} is already being deleted`, { worldStatus: status });
          const { rows: children } = await tx.query<{ id: string }>(
            `SELECT id FROM worlds WHERE parent_world = $1 AND status <> 'DELETED' ORDER BY id`,
            [world],
          );
          if (children.length > 0) {
            const ids = children.map((c) => c.id);
            throw new Conflict(`world ${world} cannot be deleted: ${ids.join(', ')} fork from it; delete them first`, {
              children: ids,
            });
          }
          await tx.query(`UPDATE worlds SET status = 'DELETING', dropped_by = '{}', updated_at = now() WHERE id = $1`, [
            world,
          ]);
          await new Outbox(tx, app.topicPrefix).add({
            ...worldEvent('world.deleted', world, {}),
            headers: { 'x-request-id': request.id },
          });
          await recordAudit(tx, request, { action: 'world.delete', result: 'accepted', worldId: world });
          return (await tx.query(`${SELECT_WORLD} WHERE id = $1`, [world])).rows[0];
        });
        reply.code(202);
        return row;
      },
    );
  },
  { name: 'onto-control-worlds', dependencies: ['onto-auth'] },
);

/**
 * Checks a fork synchronously, nothing stored yet: the base exists, is READY (locked so that it
 * cannot start being deleted meanwhile), the caller has a role in it, the new world is not among
 * its ancestors, and the ref resolves; then says which schema to copy and where data forks.
 */
async function checkFork(
  tx: pg.ClientBase,
  request: FastifyRequest,
  id: string,
  from: { world: string; ref?: string },
): Promise<ForkPoint> {
  const parent = await tx.query<{ status: string }>('SELECT status FROM worlds WHERE id = $1 FOR SHARE', [from.world]);
  const status = parent.rows[0]?.status;
  if (!status || status === 'DELETED') {
    throw new HttpProblem(404, 'not-found', 'Not Found', `world ${from.world} does not exist`, {
      errors: [{ path: '/from/world', message: `no world ${from.world}` }],
    });
  }
  if (status !== 'READY') {
    throw new Conflict(`world ${from.world} is ${status}, not READY: it cannot be forked`, {
      worldStatus: status,
      errors: [{ path: '/from/world', message: `must be READY, not ${status}` }],
    });
  }
  const roles = request.principal?.roles ?? {};
  if (!request.principal?.admin && !Object.hasOwn(roles, from.world))
    throw new Forbidden(`no role in world ${from.world}`);
  // Ids are never reused, so a new world cannot be its own ancestor; checked all the same.
  const { rows: cycle } = await tx.query(
    `WITH RECURSIVE chain (id, parent_world) AS (
       SELECT id, parent_world FROM worlds WHERE id = $1
       UNION SELECT w.id, w.parent_world FROM worlds w JOIN chain c ON w.id = c.parent_world)
     SELECT 1 FROM chain WHERE id = $2`,
    [from.world, id],
  );
  if (cycle.length > 0) {
    throw new Unprocessable(`world ${id} would fork from itself`, [
      { path: '/from/world', message: `${from.world} descends from ${id}` },
    ]);
  }
  return forkPoint(tx, from.world, from.ref);
}
