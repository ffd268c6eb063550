import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  actorOf,
  BODY_LIMITS,
  Conflict,
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

/** The longest a policy may ask for: a century of days, a million versions of a key. */
export const MAX_KEEP_DAYS = 36_500;
export const MAX_KEEP_VERSIONS = 1_000_000;

const KeepDays = Type.Union([Type.Integer({ minimum: 0, maximum: MAX_KEEP_DAYS }), Type.Null()], {
  default: null,
  description:
    'history is kept at least this many days, and reads at a ref older than what is kept answer 410; at least RETENTION_MIN_DAYS; null: forever (nothing is pruned)',
});
const KeepVersions = Type.Union([Type.Integer({ minimum: 1, maximum: MAX_KEEP_VERSIONS }), Type.Null()], {
  default: null,
  description:
    'and the newest keepVersions versions of each object and link (the current one counted) are kept whatever their age; needs keepDays',
});
// Either may be left out: it is null (its default), as the service has always taken it.
const Settings = Type.Object(
  { keepDays: Type.Optional(KeepDays), keepVersions: Type.Optional(KeepVersions) },
  { additionalProperties: false },
);
const Retention = Type.Object({
  keepDays: KeepDays,
  keepVersions: KeepVersions,
  world: Type.String(),
  revision: Type.Integer({ description: '0: never set (history is kept forever)' }),
  updatedBy: Type.Union([Type.String(), Type.Null()]),
  updatedAt: Type.Union([Type.String(), Type.Null()]),
});
type Retention = Static<typeof Retention>;
const Params = Type.Object({ world: Type.String({ pattern: WORLD_ID }) });

const SELECT = `SELECT world_id AS world, keep_days AS "keepDays", keep_versions AS "keepVersions", revision,
                       updated_by AS "updatedBy", to_json(updated_at)#>>'{}' AS "updatedAt"
                  FROM world_retention WHERE world_id = $1`;

export interface RetentionDefaults {
  /** RETENTION_MIN_DAYS: no policy may keep fewer days. */
  minDays: number;
  /** RETENTION_DEFAULT_KEEP_DAYS / _KEEP_VERSIONS: the policy of a world created without one (undefined: forever). */
  keepDays: number | undefined;
  keepVersions: number | undefined;
}

export async function retentionOf(db: pg.ClientBase | pg.Pool, world: string): Promise<Retention> {
  const { rows } = await db.query<Retention>(SELECT, [world]);
  return rows[0] ?? { world, keepDays: null, keepVersions: null, revision: 0, updatedBy: null, updatedAt: null };
}

/**
 * Stores a world's policy and, in the same transaction, `world.retention.updated` on onto.worlds
 * (the world's partition, after its world.created): data prunes by it (docs/adr/0072).
 */
export async function setRetention(
  tx: pg.ClientBase,
  topicPrefix: string,
  world: string,
  policy: { keepDays: number | null; keepVersions: number | null },
  actor: string,
): Promise<number> {
  const { rows } = await tx.query<{ revision: number }>(
    `INSERT INTO world_retention AS r (world_id, keep_days, keep_versions, updated_by)
     VALUES ($1, $2, $3, $4)
     ON CONFLICT (world_id) DO UPDATE
        SET keep_days = EXCLUDED.keep_days, keep_versions = EXCLUDED.keep_versions,
            updated_by = EXCLUDED.updated_by, updated_at = now(), revision = r.revision + 1
     RETURNING revision`,
    [world, policy.keepDays, policy.keepVersions, actor],
  );
  const revision = rows[0]?.revision ?? 1;
  const event = newEvent({
    type: 'world.retention.updated',
    worldId: world,
    key: world,
    version: revision,
    producer: 'control',
    producerSeq: 0,
    payload: { keepDays: policy.keepDays, keepVersions: policy.keepVersions, revision },
  });
  await new Outbox(tx, topicPrefix).add({ event, key: TOPICS['onto.worlds'].key({ worldId: world }) });
  return revision;
}

/** A world's retained horizon as data announced it, as `GET /v1/worlds/{world}` answers it (docs/adr/0077). */
export const HistoryHorizon = Type.Union(
  [
    Type.Object({
      commit: Type.Integer({
        minimum: 0,
        description:
          "data's commit below which the world's history is pruned: reads at an older commit answer 410, unless it is a kept point (a tag, a child world's fork point, a merge's point, a live page token)",
      }),
      movedAt: Type.String({
        format: 'date-time',
        description: 'when data moved the horizon there (its storage.history.horizon announcement)',
      }),
    }),
    Type.Null(),
  ],
  {
    description:
      "the world's retained history horizon as data last announced it (storage.history.horizon); null: data has pruned nothing of the world (no policy, or no pass yet). Learnt from Kafka, so it may lag data's GET /v1/worlds/{world}/history by the consumer's delay",
  },
);

/** `storage.history.horizon` from data: only a greater horizon replaces the one recorded (redeliveries and late ones change nothing). */
export async function applyHorizons(tx: pg.ClientBase, events: ReceivedEvent[]): Promise<void> {
  for (const { event } of events) {
    if (!isEvent(event, 'storage.history.horizon')) continue;
    await tx.query(
      `INSERT INTO world_horizons AS h (world_id, horizon_seq, moved_at)
       SELECT id, $2, $3 FROM worlds WHERE id = $1
       ON CONFLICT (world_id) DO UPDATE SET horizon_seq = EXCLUDED.horizon_seq, moved_at = EXCLUDED.moved_at
        WHERE h.horizon_seq < EXCLUDED.horizon_seq`,
      [event.world_id, event.payload.horizon, event.occurred_at],
    );
  }
}

/** The configured default for a world being created (nothing when history is kept forever by default). */
export async function applyDefaultRetention(
  tx: pg.ClientBase,
  topicPrefix: string,
  world: string,
  defaults: RetentionDefaults,
  actor: string,
): Promise<void> {
  if (defaults.keepDays === undefined) return;
  await setRetention(
    tx,
    topicPrefix,
    world,
    { keepDays: defaults.keepDays, keepVersions: defaults.keepVersions ?? null },
    actor,
  );
}

/**
 * `PUT|GET /v1/worlds/{world}/retention` (docs/adr/0072): owners set how long the world's history
 * is kept; data prunes the rest in bounded batches, never what a tag, a child world's fork point,
 * a merge or a live page token still reads.
 */
export default fp(
  async (fastify: FastifyInstance, opts: RetentionDefaults) => {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
    const errors = problemResponses(400, 401, 403, 404, 409, 422, 503);

    app.get(
      '/v1/worlds/:world/retention',
      {
        preHandler: app.authorize({ role: 'viewer' }),
        schema: {
          tags: ['worlds'],
          summary: "The world's history retention",
          description:
            "The horizon it has reached (reads at an older ref answer 410) is data's: GET /v1/worlds/{world} answers it as data announced it (historyHorizon), and GET /v1/worlds/{world}/history on data with the kept points.",
          params: Params,
          response: { 200: Retention, ...errors },
        },
      },
      async (request) => {
        const { world } = request.params;
        return inTransaction(app.pg, async (tx) => {
          await lockWorld(tx, world);
          return retentionOf(tx, world);
        });
      },
    );

    app.put(
      '/v1/worlds/:world/retention',
      {
        bodyLimit: BODY_LIMITS.small,
        preHandler: app.authorize({ role: 'owner' }),
        schema: {
          tags: ['worlds'],
          summary: 'Set how long the history of the world is kept',
          description: `keepDays below RETENTION_MIN_DAYS (${opts.minDays}) is a 422 naming /keepDays, keepVersions without keepDays a 422 naming /keepVersions; a world in a running merge (as its target or source) is a 409.`,
          params: Params,
          body: Settings,
          response: { 200: Retention, ...errors },
        },
      },
      async (request) => {
        const { world } = request.params;
        const { keepDays = null, keepVersions = null } = request.body;
        if (keepDays !== null && keepDays < opts.minDays) {
          throw new Unprocessable(`history must be kept at least ${opts.minDays} day(s) (RETENTION_MIN_DAYS)`, [
            { path: '/keepDays', message: `must be at least ${opts.minDays} (RETENTION_MIN_DAYS), or null (forever)` },
          ]);
        }
        if (keepDays === null && keepVersions !== null) {
          throw new Unprocessable('keepVersions limits pruning by keepDays: without keepDays nothing is pruned', [
            { path: '/keepVersions', message: 'must be null when keepDays is null' },
          ]);
        }
        return inTransaction(app.pg, async (tx) => {
          await lockWritableWorld(tx, world);
          // A merge reads both worlds at recorded points until it ends: the policy waits for it.
          const { rows: running } = await tx.query<{ id: string; target: string }>(
            `SELECT id, target FROM merges WHERE (target = $1 OR source = $1) AND status IN ('RUNNING', 'CONFLICTS') LIMIT 1`,
            [world],
          );
          const merge = running[0];
          if (merge) {
            throw new Conflict(
              `world ${world} is being merged (merge ${merge.id}): set its retention once the merge is done`,
              { merge: merge.id, errors: [{ path: '/', message: 'the world is in a running merge' }] },
            );
          }
          const revision = await setRetention(tx, app.topicPrefix, world, { keepDays, keepVersions }, actorOf(request));
          await recordAudit(tx, request, {
            action: 'world.retention.set',
            result: 'updated',
            worldId: world,
            subject: world,
            detail: { keepDays, keepVersions, revision },
          });
          return retentionOf(tx, world);
        });
      },
    );
  },
  { name: 'onto-control-world-retention', dependencies: ['onto-auth'] },
);
