import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  actorOf,
  BODY_LIMITS,
  inTransaction,
  isEvent,
  newEvent,
  Outbox,
  problemResponses,
  type ReceivedEvent,
  recordAudit,
  TOPICS,
  Unprocessable,
  WORLD_ID,
} from '@onto/shared';
import { type Static, Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type pg from 'pg';
import { lockWorld, lockWritableWorld } from './repository.js';

/** The most approvals a protection may ask for, and rules it may name. */
const MAX_APPROVALS = 20;
const MAX_CHECKS = 50;
const RULE_NAME = '^[A-Za-z][A-Za-z0-9_]{0,62}$';

const Settings = Type.Object(
  {
    requireMerge: Type.Boolean({ description: 'refuse direct writes of objects, links, bulk and series (403)' }),
    requiredApprovals: Type.Integer({
      minimum: 0,
      maximum: MAX_APPROVALS,
      default: 0,
      description:
        "approvals a merge into the world needs, by owners other than its author; at most the world's owners",
    }),
    requiredChecks: Type.Array(Type.String({ pattern: RULE_NAME }), {
      maxItems: MAX_CHECKS,
      uniqueItems: true,
      default: [],
      description: 'rules of intelligence that must not fire on the merged result of a merge into the world',
    }),
    allowActions: Type.Boolean({
      default: false,
      description: "with requireMerge, still apply actions' edits (intelligence's actions) directly",
    }),
  },
  { additionalProperties: false },
);
// One object, not an intersection with Settings: Settings refuses unknown properties, so an
// `allOf` of the two would refuse every answer (a generated client validates them).
const Protection = Type.Object({
  ...Settings.properties,
  world: Type.String(),
  revision: Type.Integer({ description: '0: never set (the world is unprotected)' }),
  updatedBy: Type.Union([Type.String(), Type.Null()]),
  updatedAt: Type.Union([Type.String(), Type.Null()]),
});
type Protection = Static<typeof Protection>;
const Params = Type.Object({ world: Type.String({ pattern: WORLD_ID }) });

const SELECT = `SELECT world_id AS world, require_merge AS "requireMerge", required_approvals AS "requiredApprovals",
                       required_checks AS "requiredChecks", allow_actions AS "allowActions", revision,
                       updated_by AS "updatedBy", to_json(updated_at)#>>'{}' AS "updatedAt"
                  FROM world_protection WHERE world_id = $1`;

/**
 * `intelligence.rules.changed`: the names of a world's rules, kept for the check of requiredChecks.
 * Reports of a world control no longer has are dropped (the foreign key would refuse them).
 */
export async function applyRuleReports(tx: pg.ClientBase, events: ReceivedEvent[]): Promise<void> {
  for (const { event } of events) {
    if (!isEvent(event, 'intelligence.rules.changed')) continue;
    const p = event.payload;
    await tx.query(
      `INSERT INTO world_rules AS r (world_id, rules, definitions)
       SELECT id, $2, $3 FROM worlds WHERE id = $1
       ON CONFLICT (world_id) DO UPDATE SET rules = EXCLUDED.rules, definitions = EXCLUDED.definitions
        WHERE r.definitions < EXCLUDED.definitions`,
      [event.world_id, p.rules, p.definitions],
    );
  }
}

/** A world's protection; an unprotected one when none was ever set. */
export async function protectionOf(db: pg.ClientBase | pg.Pool, world: string): Promise<Protection> {
  const { rows } = await db.query<Protection>(SELECT, [world]);
  return (
    rows[0] ?? {
      world,
      requireMerge: false,
      requiredApprovals: 0,
      requiredChecks: [],
      allowActions: false,
      revision: 0,
      updatedBy: null,
      updatedAt: null,
    }
  );
}

/**
 * `PUT|GET /v1/worlds/{world}/protection` (docs/adr/0058): owners set it, in one transaction with
 * `world.protection.updated` on onto.worlds, from which data (and intelligence) enforce it.
 */
export default fp(
  async (fastify: FastifyInstance) => {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
    const errors = problemResponses(400, 401, 403, 404, 409, 422, 503);

    app.get(
      '/v1/worlds/:world/protection',
      {
        preHandler: app.authorize({ role: 'viewer' }),
        schema: {
          tags: ['worlds'],
          summary: "The world's protection",
          params: Params,
          response: { 200: Protection, ...errors },
        },
      },
      async (request) => {
        const { world } = request.params;
        return inTransaction(app.pg, async (tx) => {
          await lockWorld(tx, world);
          return protectionOf(tx, world);
        });
      },
    );

    app.put(
      '/v1/worlds/:world/protection',
      {
        bodyLimit: BODY_LIMITS.small,
        preHandler: app.authorize({ role: 'owner' }),
        schema: {
          tags: ['worlds'],
          summary: 'Protect the world: changes by merge only, with approvals and checks',
          description: `requiredApprovals may not exceed the number of the world's owners (422 naming /requiredApprovals); requiredChecks name rules the world has in intelligence (422 naming /requiredChecks/<i>).`,
          params: Params,
          body: Settings,
          response: { 200: Protection, ...errors },
        },
      },
      async (request) => {
        const { world } = request.params;
        const body = request.body;
        return inTransaction(app.pg, async (tx) => {
          await lockWritableWorld(tx, world);
          // The owners now: one removed later leaves the setting as it is (its merges then wait for approvals).
          const { rows: owners } = await tx.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM world_roles WHERE world_id = $1 AND role = 'owner'`,
            [world],
          );
          const ownerCount = owners[0]?.n ?? 0;
          if (body.requiredApprovals > ownerCount) {
            throw new Unprocessable(`world ${world} has ${ownerCount} owner(s): it cannot ask for more approvals`, [
              {
                path: '/requiredApprovals',
                message: `must be at most the number of the world's owners (${ownerCount})`,
              },
            ]);
          }
          // Checks name rules intelligence has reported for the world (the latest report).
          const { rows: known } = await tx.query<{ rules: string[] }>(
            'SELECT rules FROM world_rules WHERE world_id = $1',
            [world],
          );
          const rules = new Set(known[0]?.rules ?? []);
          const unknown = body.requiredChecks.flatMap((name, i) =>
            rules.has(name)
              ? []
              : [
                  {
                    path: `/requiredChecks/${i}`,
                    message: `is not a rule of world ${world} (as intelligence reported)`,
                  },
                ],
          );
          if (unknown.length > 0) {
            throw new Unprocessable(`requiredChecks names rules world ${world} does not have`, unknown);
          }
          const { rows } = await tx.query<{ revision: number }>(
            `INSERT INTO world_protection AS p
                    (world_id, require_merge, required_approvals, required_checks, allow_actions, updated_by)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (world_id) DO UPDATE
                SET require_merge = EXCLUDED.require_merge, required_approvals = EXCLUDED.required_approvals,
                    required_checks = EXCLUDED.required_checks, allow_actions = EXCLUDED.allow_actions,
                    updated_by = EXCLUDED.updated_by, updated_at = now(), revision = p.revision + 1
             RETURNING revision`,
            [
              world,
              body.requireMerge,
              body.requiredApprovals,
              body.requiredChecks,
              body.allowActions,
              actorOf(request),
            ],
          );
          const revision = rows[0]?.revision ?? 1;
          await recordAudit(tx, request, {
            action: 'world.protection.set',
            result: 'updated',
            worldId: world,
            subject: world,
            detail: { ...body, revision },
          });
          const event = newEvent({
            type: 'world.protection.updated',
            worldId: world,
            key: world,
            version: revision,
            producer: 'control',
            producerSeq: 0,
            payload: { ...body, revision },
          });
          await new Outbox(tx, app.topicPrefix).add({ event, key: TOPICS['onto.worlds'].key({ worldId: world }) });
          return protectionOf(tx, world);
        });
      },
    );
  },
  { name: 'onto-control-world-protection', dependencies: ['onto-auth'] },
);
