import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  BadRequest,
  BODY_LIMITS,
  Headers,
  HttpProblem,
  inTransaction,
  NotFound,
  principalOf,
  problemResponses,
  recordAudit,
  Unprocessable,
  UUID_V7,
  WORLD_ID,
  withExamples,
} from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import type pg from 'pg';
import { AtState, notProvisioned, provisioned, ReadHeaders } from '../http.js';
import { batchAnswerExamples, batchExamples, runExamples, validationExamples } from './examples.js';
import { IdempotencyRedis } from './idempotency.js';

/**
 * A world that takes changes by merge only starts no action from a request unless its protection
 * allows actions (docs/adr/0058): 403 naming the protection. data refuses the edits as well, for
 * actions started otherwise (decisions).
 */
async function refuseProtectedWorld(db: pg.Pool, world: string): Promise<void> {
  const { rows } = await db.query<{ require_merge: boolean; allow_actions: boolean }>(
    'SELECT require_merge, allow_actions FROM worlds WHERE id = $1',
    [world],
  );
  const w = rows[0];
  if (!w?.require_merge || w.allow_actions) return;
  throw new HttpProblem(
    403,
    'protected-world',
    'Forbidden',
    `world ${world} is protected (requireMerge): it changes by merge only, and its protection does not allow actions`,
    { world, protection: { requireMerge: true, allowActions: false } },
  );
}

import { actionMetrics } from './metrics.js';
import { fingerprint } from './plan.js';
import {
  ACTION_STATUSES,
  type ActionAt,
  type ActionPoint,
  findKey,
  getAction,
  type KeyRecord,
  listActions,
  listActionsAt,
  pruneKeys,
  stepsAt,
  stepsOf,
} from './repository.js';
import { ActionSagas, actionView, callerScope, type StartRequest } from './saga.js';

/** What the rest of intelligence (decisions) may do with actions. */
export interface ActionsApi {
  /**
   * Checks and records an action and enqueues its first step in the caller's transaction, under
   * an idempotency key scoped to the actor: a key seen before with the same parameters answers
   * the action it started (`replayed`); with others, 422. 404 for an unknown action type, 422
   * for parameters that do not fit it.
   */
  start(tx: pg.PoolClient, request: StartRequest): Promise<{ actionId: string; replayed: boolean }>;
  /** Deletes the expired idempotency keys now (the periodic job does it too); returns how many. */
  pruneKeys(): Promise<number>;
}

declare module 'fastify' {
  interface FastifyInstance {
    actions: ActionsApi;
  }
}

export interface ActionsOptions {
  /** How long an idempotency key is remembered (7 days). */
  keyTtlMs: number;
  /** How long the Redis lock of a request in flight lives, should its holder die. */
  lockMs: number;
  /**
   * Names this deployment's keys in a Redis that others may share (another database, another
   * topic prefix): a key remembered by one must never answer for another.
   */
  redisNamespace: string;
  /** How often expired keys are pruned. */
  pruneIntervalMs: number;
  /** How long a step may await its reply before it is asked for again. */
  stepRetryMs: number;
}

const NAME = '^[A-Za-z][A-Za-z0-9_]{0,62}$';
const errors = problemResponses(400, 401, 403, 404, 409, 422, 503);
/** The reads, which take `?at=`: also 410 before the world's retained horizon (docs/adr/0072, 0073). */
const readErrors = problemResponses(400, 401, 403, 404, 409, 410, 422, 503);
const AT_DESCRIPTION =
  "With ?at=<ref> (docs/adr/0078): each action and its steps exactly as they were at that ref — its newest state recorded by then on both of intelligence's axes, the data commit (the world's data applied then, or the commit its step's edits made) and intelligence's own order (a tag's or fork's moment) — and no action started after it (404 by id). In a fork, now and at a ref, the base's actions are listed as of the fork point (inherited: true, world: the base), never one the base started or a state it reached after it, the same through chains of forks. A ref below the world's retained horizon that no tag or child fork names answers 410 with the horizon; a malformed ref 400; each naming querystring/at.";
const Json = Type.Unknown();
const Nullable = <T extends ReturnType<typeof Type.String>>(t: T) => Type.Union([t, Type.Null()]);
const ActionBody = Type.Object({
  id: Type.String(),
  world: Type.String(),
  actionType: Type.String(),
  status: Type.Union(ACTION_STATUSES.map((s) => Type.Literal(s))),
  parameters: Type.Record(Type.String(), Json),
  schemaVersion: Type.Integer(),
  actor: Type.String(),
  idempotencyKey: Nullable(Type.String()),
  causedBy: Nullable(Type.String()),
  refusal: Json,
  createdAt: Type.String(),
  updatedAt: Type.String(),
  finishedAt: Nullable(Type.String()),
  inherited: Type.Optional(
    Type.Boolean({
      description:
        "on reads: true for a base's action a fork lists as of its fork point (read-only: world names the base)",
    }),
  ),
  steps: Type.Array(
    Type.Object({
      n: Type.Integer(),
      command: Json,
      state: Type.String({
        description: 'PENDING, REQUESTED, COMPLETED, REFUSED, SKIPPED, COMPENSATING, COMPENSATED, COMPENSATION_REFUSED',
      }),
      result: Json,
      refusal: Json,
      compensation: Json,
      compensationResult: Json,
      compensationRefusal: Json,
    }),
  ),
});
const Summary = Type.Object({
  id: Type.String(),
  actionType: Type.String(),
  status: Type.String(),
  actor: Type.String(),
  refusal: Json,
  createdAt: Type.String(),
  updatedAt: Type.String(),
  finishedAt: Nullable(Type.String()),
  inherited: Type.Boolean({
    description: "true for a base's action a fork lists as of its fork point (read-only: nothing here acts on it)",
  }),
  world: Type.Optional(Type.String({ description: 'the base world an inherited action is of' })),
});
const WorldParams = Type.Object({ world: Type.String({ pattern: WORLD_ID }) });
/** What `validateOnly` answers: nothing stored, nothing sent. */
const Validation = Type.Object({
  valid: Type.Boolean(),
  errors: Type.Array(Type.Object({ path: Type.String(), message: Type.String() }), {
    description: 'each fault with the JSON path of its parameter (/parameters/amount)',
  }),
  // Each a StepCommand (packages/shared/src/ontology/actions.ts); as records, since the serializer's
  // union matching dropped their properties.
  edits: Type.Array(Type.Record(Type.String(), Type.Unknown()), {
    description:
      'the commands data would apply, in order (none when invalid): op, objectType or linkType, pk, properties…',
  }),
  schemaVersion: Type.Integer({ description: 'the schema version the action was checked against' }),
});
/** Actions one batch request may carry (issue 30). */
export const BATCH_MAX = 20;

/** A batch item's problem as a problem+json body, its paths under `body/items/<index>`. */
function itemProblem(error: HttpProblem, index: number) {
  const at = (path: string) =>
    path === 'header/idempotency-key'
      ? `body/items/${index}/idempotencyKey`
      : path.startsWith('body/')
        ? `body/items/${index}/${path.slice('body/'.length)}`
        : path.startsWith('/')
          ? `body/items/${index}${path}`
          : path;
  return {
    type: `https://onto.dev/problems/${error.slug}`,
    title: error.title,
    status: error.status,
    detail: error.detail,
    errors: (error.extensions.errors ?? []).map((e) => ({ path: at(e.path), message: e.message })),
  };
}

const UUID = '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$';

/** `Idempotency-Key`: 1 to 255 printable ASCII characters, bare or as a quoted sf-string. */
function idempotencyKeyOf(request: FastifyRequest): string {
  const raw = request.headers['idempotency-key'];
  if (raw === undefined) {
    throw new BadRequest('the Idempotency-Key header is required: a unique string per request, such as a UUID', [
      { path: 'header/idempotency-key', message: 'is required' },
    ]);
  }
  let key = String(raw).trim();
  if (key.length >= 2 && key.startsWith('"') && key.endsWith('"')) key = key.slice(1, -1);
  if (key.length === 0 || key.length > 255 || !/^[\x20-\x7e]+$/.test(key)) {
    throw new BadRequest('the Idempotency-Key header is malformed', [
      { path: 'header/idempotency-key', message: 'must be 1 to 255 printable ASCII characters' },
    ]);
  }
  return key;
}

/**
 * Actions (docs/adr/0011): `POST /v1/worlds/{world}/actions/{actionType}` with an
 * Idempotency-Key, the action's status and steps, the list; the saga's consumer
 * `intelligence-actions` on domain.actions; the pruning of expired keys; `app.actions`.
 */
export default fp(
  async (fastify: FastifyInstance, opts: ActionsOptions) => {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
    const sagas = new ActionSagas(app, opts.keyTtlMs, app.log.child({ component: 'actions' }));
    const redis = new IdempotencyRedis(
      app.redis,
      opts.redisNamespace,
      opts.lockMs,
      app.log.child({ component: 'idempotency' }),
    );
    const metrics = actionMetrics(app.metrics, app.pg);

    app.decorate('actions', {
      start: async (tx: pg.PoolClient, request: StartRequest) => {
        const { actionId, replayed } = await sagas.start(tx, request);
        return { actionId, replayed };
      },
      pruneKeys: () => pruneKeys(app.pg),
    } satisfies ActionsApi);

    app.addConsumer({
      name: 'intelligence-actions',
      topics: ['domain.actions'],
      apply: (tx, events) => sagas.applyReplies(tx, events),
    });

    app.jobs.every('intelligence.prune-idempotency-keys', opts.pruneIntervalMs, async () => {
      const n = await pruneKeys(app.pg);
      if (n > 0) app.log.info({ pruned: n }, 'expired idempotency keys pruned');
    });
    // Stalled steps are asked for again by one replica at a time (the retry locks its rows besides).
    app.jobs.every('intelligence.retry-stalled-steps', Math.max(100, Math.floor(opts.stepRetryMs / 2)), () =>
      inTransaction(app.pg, (tx) => sagas.retryStalled(tx, opts.stepRetryMs)),
    );

    /** The answer a key's record holds, marked when it is a replay. */
    async function answer(reply: FastifyReply, world: string, record: KeyRecord, replayed: boolean) {
      metrics.request(replayed ? 'replayed' : 'executed');
      reply.code(record.response.status).headers(record.response.headers);
      if (replayed) reply.header('idempotent-replayed', 'true');
      await app.consistencyHeader(reply, world);
      return record.response.body as never;
    }

    function mismatch(record: KeyRecord): never {
      metrics.request('mismatch');
      throw new Unprocessable('this Idempotency-Key was used for another request', [
        {
          path: 'header/idempotency-key',
          message: `was used within its lifetime for a request with another action type or other parameters (action ${record.actionId})`,
        },
      ]);
    }

    /** A dry run (validateOnly): the plan, recorded as a request that changed nothing (docs/adr/0084). */
    function validate(
      request: FastifyRequest,
      world: string,
      actionType: string,
      parameters: Record<string, unknown>,
      item?: number,
    ) {
      return inTransaction(app.pg, async (tx) => {
        const plan = await sagas.plan(tx, world, actionType, parameters);
        await recordAudit(tx, request, {
          action: 'action.validate',
          result: 'unchanged',
          worldId: world,
          subject: actionType,
          detail: { valid: plan.errors.length === 0, ...(item === undefined ? {} : { item }) },
        });
        return plan;
      });
    }

    /**
     * Runs one action request under its Idempotency-Key: a replay of the key's first answer, a
     * 422 for the key used with other parameters, a 409 while it is in flight, or a new action.
     */
    async function execute(
      request: FastifyRequest,
      world: string,
      actionType: string,
      key: string,
      actor: string,
      parameters: Record<string, unknown>,
    ): Promise<{ record: KeyRecord; replayed: boolean }> {
      const scope = callerScope(actor);
      const print = fingerprint(world, actionType, parameters);
      const cached = await redis.cached(world, scope, key);
      if (cached) return cached.fingerprint === print ? { record: cached, replayed: true } : mismatch(cached);
      await refuseProtectedWorld(app.pg, world);
      const lock = await redis.lock(world, scope, key);
      try {
        if (lock.state === 'held') {
          // In flight elsewhere, or done with its lock not yet released: PostgreSQL knows which.
          const done = await findKey(app.pg, world, scope, key);
          if (done) return done.fingerprint === print ? { record: done, replayed: true } : mismatch(done);
          metrics.request('in_progress');
          throw new HttpProblem(
            409,
            'conflict',
            'Conflict',
            'a request with this Idempotency-Key is in progress; retry it shortly',
            { errors: [{ path: 'header/idempotency-key', message: 'is in use by a request in progress' }] },
            { 'retry-after': '1' },
          );
        }
        const started = await inTransaction(app.pg, async (tx) => {
          const start = await sagas.start(tx, {
            worldId: world,
            actionType,
            parameters,
            idempotencyKey: key,
            actor,
            causedBy: null,
          });
          // A replay answers the request that started the action, which was recorded (docs/adr/0084).
          if (!start.replayed) {
            await recordAudit(tx, request, {
              action: 'action.run',
              result: 'accepted',
              worldId: world,
              subject: start.actionId,
              detail: { actionType, idempotencyKey: key },
            });
          }
          return start;
        }).catch((error: unknown) => {
          if (error instanceof Unprocessable && error.extensions.errors?.[0]?.path === 'header/idempotency-key') {
            metrics.request('mismatch');
          }
          throw error;
        });
        await redis.remember(world, scope, key, started.record);
        return { record: started.record, replayed: started.replayed };
      } finally {
        await redis.release(lock);
      }
    }

    app.post(
      '/v1/worlds/:world/actions/:actionType',
      {
        bodyLimit: BODY_LIMITS.object,
        preHandler: app.authorize({ role: 'editor' }),
        schema: {
          tags: ['actions'],
          summary: 'Run an action type',
          description:
            'Requires Idempotency-Key (unique per request; remembered 7 days per world and caller). Answers 202 with the action, RUNNING, and Location; the saga runs its edits in data and the action ends COMPLETED, COMPENSATED (a step was refused and the completed ones undone) or FAILED (an undo was refused). The same key with the same parameters replays the first answer with Idempotent-Replayed: true; with other parameters, 422; while the first request is still in flight, 409 with Retry-After.',
          params: Type.Object({
            world: Type.String({ pattern: WORLD_ID }),
            actionType: Type.String({ pattern: NAME, description: 'the action type (apiName)' }),
          }),
          headers: Type.Object({
            'idempotency-key': Headers.idempotencyKey(),
            'x-consistency-token': Headers.consistencyToken(
              'control=<schema version>: wait (bounded) until it is applied here',
            ),
          }),
          body: Type.Optional(
            withExamples(
              Type.Object(
                {
                  parameters: Type.Optional(Type.Record(Type.String({ pattern: NAME }), Type.Unknown())),
                  validateOnly: Type.Optional(
                    Type.Boolean({
                      description:
                        'true: answer 200 with whether the parameters are valid and the edits the action would make; nothing runs and the Idempotency-Key is not used up',
                    }),
                  ),
                },
                { additionalProperties: false },
              ),
              runExamples,
            ),
          ),
          response: { 200: withExamples(Validation, validationExamples), 202: ActionBody, ...errors },
        },
      },
      async (request, reply) => {
        const { world, actionType } = request.params;
        const key = idempotencyKeyOf(request);
        const actor = principalOf(request).userId;
        const parameters = request.body?.parameters ?? {};
        await app.awaitConsistency(request, world);
        if (request.body?.validateOnly === true) {
          const plan = await validate(request, world, actionType, parameters);
          await app.consistencyHeader(reply, world);
          return reply.code(200).send({
            valid: plan.errors.length === 0,
            errors: plan.errors.slice(0, 50),
            edits: plan.errors.length === 0 && plan.resolved ? plan.resolved.commands : [],
            schemaVersion: plan.schema.version,
          } as never);
        }
        const { record, replayed } = await execute(request, world, actionType, key, actor, parameters);
        return answer(reply, world, record, replayed);
      },
    );

    app.post(
      '/v1/worlds/:world/actions/:actionType/batch',
      {
        bodyLimit: BODY_LIMITS.object,
        preHandler: app.authorize({ role: 'editor' }),
        schema: {
          tags: ['actions'],
          summary: 'Run up to 20 actions of one type in one request, each with its own result',
          description: `Each item is one action request with its own idempotencyKey (the rules of Idempotency-Key on POST …/actions/{actionType}: remembered 7 days per world and caller; the same key with the same parameters replays its first answer, with other parameters 422, in flight 409). Items run in order, each on its own: one refused does not stop the others. Answers 200 with one result per item, in order: status 202 and the action (replayed: true for a replay), 200 and the validation (validateOnly), or the problem that item met, its paths under body/items/<i>. At most ${BATCH_MAX} items (more: 400 naming body/items); two items with one key: 422 naming the second's idempotencyKey; a body over the size limit: 413.`,
          params: Type.Object({
            world: Type.String({ pattern: WORLD_ID }),
            actionType: Type.String({ pattern: NAME, description: 'the action type (apiName)' }),
          }),
          headers: Type.Object({
            'x-consistency-token': Headers.consistencyToken(
              'control=<schema version>: wait (bounded) until it is applied here',
            ),
          }),
          body: withExamples(
            Type.Object(
              {
                items: Type.Array(
                  Type.Object(
                    {
                      idempotencyKey: Type.String({
                        minLength: 1,
                        maxLength: 255,
                        pattern: '^[\\x20-\\x7e]+$',
                        description: 'as Idempotency-Key: 1 to 255 printable ASCII characters, unique per request',
                      }),
                      parameters: Type.Optional(Type.Record(Type.String({ pattern: NAME }), Type.Unknown())),
                    },
                    { additionalProperties: false },
                  ),
                  { minItems: 1, maxItems: BATCH_MAX },
                ),
                validateOnly: Type.Optional(
                  Type.Boolean({
                    description:
                      'true: check every item and answer the edits each would make; nothing runs, no key is used up',
                  }),
                ),
              },
              { additionalProperties: false },
            ),
            batchExamples,
          ),
          response: {
            200: withExamples(
              Type.Object({
                results: Type.Array(
                  Type.Object({
                    index: Type.Integer(),
                    idempotencyKey: Type.String(),
                    status: Type.Integer({ description: 'the status the item would have answered alone' }),
                    replayed: Type.Boolean(),
                    action: Type.Union([ActionBody, Type.Null()]),
                    validation: Type.Union([Validation, Type.Null()]),
                    problem: Type.Union([
                      Type.Object({
                        type: Type.String(),
                        title: Type.String(),
                        status: Type.Integer(),
                        detail: Type.String(),
                        errors: Type.Array(Type.Object({ path: Type.String(), message: Type.String() })),
                      }),
                      Type.Null(),
                    ]),
                  }),
                ),
              }),
              batchAnswerExamples,
            ),
            ...errors,
          },
        },
      },
      async (request, reply) => {
        const { world, actionType } = request.params;
        const { items, validateOnly } = request.body;
        const actor = principalOf(request).userId;
        const seen = new Map<string, number>();
        for (const [i, item] of items.entries()) {
          const first = seen.get(item.idempotencyKey);
          if (first !== undefined) {
            throw new Unprocessable('two items of the batch carry one idempotencyKey', [
              {
                path: `body/items/${i}/idempotencyKey`,
                message: `is the key of item ${first}: each item needs its own`,
              },
            ]);
          }
          seen.set(item.idempotencyKey, i);
        }
        await app.awaitConsistency(request, world);
        const results = [];
        for (const [index, item] of items.entries()) {
          const parameters = item.parameters ?? {};
          const base = { index, idempotencyKey: item.idempotencyKey, action: null, validation: null, problem: null };
          try {
            if (validateOnly === true) {
              const plan = await validate(request, world, actionType, parameters, index);
              results.push({
                ...base,
                status: 200,
                replayed: false,
                validation: {
                  valid: plan.errors.length === 0,
                  errors: plan.errors.slice(0, 50),
                  edits: plan.errors.length === 0 && plan.resolved ? plan.resolved.commands : [],
                  schemaVersion: plan.schema.version,
                },
              });
              continue;
            }
            const { record, replayed } = await execute(
              request,
              world,
              actionType,
              item.idempotencyKey,
              actor,
              parameters,
            );
            metrics.request(replayed ? 'replayed' : 'executed');
            results.push({ ...base, status: record.response.status, replayed, action: record.response.body });
          } catch (error) {
            if (!(error instanceof HttpProblem)) throw error;
            results.push({ ...base, status: error.status, replayed: false, problem: itemProblem(error, index) });
          }
        }
        await app.consistencyHeader(reply, world);
        return { results } as never;
      },
    );

    /**
     * Where a read of actions stands: `?at=` resolved as every read of intelligence's state
     * (`readPoint`: the data commit and the moment a fork at it starts from), or now. Now, a fork
     * still reads its bases as of its fork point; a world that is no fork reads its live rows.
     */
    async function actionPoint(world: string, at: string | undefined): Promise<ActionPoint | undefined> {
      const point = await app.readPoint(world, at);
      if (point) return { commit: point.commit, moment: point.moment };
      return (await app.awaitBase(world)).kind === 'none' ? undefined : { commit: null, moment: null };
    }

    app.get(
      '/v1/worlds/:world/actions/:id',
      {
        preHandler: app.authorize({ role: 'viewer' }),
        schema: {
          tags: ['actions'],
          summary: 'An action: its status and each step with its state, result or refusal',
          description: AT_DESCRIPTION,
          params: Type.Object({
            world: Type.String({ pattern: WORLD_ID }),
            id: Type.String({ pattern: UUID, description: 'the action id' }),
          }),
          headers: ReadHeaders,
          querystring: Type.Object({ at: Type.Optional(AtState) }, { additionalProperties: false }),
          response: { 200: ActionBody, ...readErrors },
        },
      },
      async (request, reply) => {
        const { world, id } = request.params;
        const waited = await app.awaitConsistency(request, world);
        if (!(await provisioned(app.pg, world))) throw notProvisioned(world);
        const point = await actionPoint(world, request.query.at);
        const { db, watermark } = await app.readModelDb(request, world, waited, {
          primaryNow: point?.commit !== undefined && point.commit !== null,
        });
        let body: ReturnType<typeof actionView> & { inherited: boolean };
        if (point) {
          const [action] = await listActionsAt(db, { worldId: world, point, id, limit: 1 });
          if (!action) {
            const when = request.query.at === undefined ? '' : ' at that ref';
            throw new NotFound(`action ${id} is not in world ${world}${when}`);
          }
          const { inherited, ...row } = action;
          body = { ...actionView(row, await stepsAt(db, row.worldId, id, row.revision)), inherited };
        } else {
          const action = await getAction(db, world, id);
          if (!action) throw new NotFound(`action ${id} does not exist in world ${world}`);
          body = { ...actionView(action, await stepsOf(db, world, id)), inherited: false };
        }
        await app.consistencyHeader(reply, world, watermark);
        return body;
      },
    );

    app.get(
      '/v1/worlds/:world/actions',
      {
        preHandler: app.authorize({ role: 'viewer' }),
        schema: {
          tags: ['actions'],
          summary: "A world's actions, newest first, with filters",
          description: AT_DESCRIPTION,
          params: WorldParams,
          headers: ReadHeaders,
          querystring: Type.Object(
            {
              status: Type.Optional(Type.Union(ACTION_STATUSES.map((s) => Type.Literal(s)))),
              actionType: Type.Optional(Type.String({ pattern: NAME })),
              actor: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
              cursor: Type.Optional(Type.String({ pattern: UUID_V7.source, description: 'next of the previous page' })),
              limit: Type.Integer({ minimum: 1, maximum: 500, default: 50 }),
              at: Type.Optional(AtState),
            },
            { additionalProperties: false },
          ),
          response: {
            200: Type.Object({ actions: Type.Array(Summary), next: Nullable(Type.String()) }),
            ...readErrors,
          },
        },
      },
      async (request, reply) => {
        const { world } = request.params;
        const { status, actionType, actor, cursor, limit, at } = request.query;
        const waited = await app.awaitConsistency(request, world);
        if (!(await provisioned(app.pg, world))) throw notProvisioned(world);
        const point = await actionPoint(world, at);
        const { db, watermark } = await app.readModelDb(request, world, waited, {
          primaryNow: point?.commit !== undefined && point.commit !== null,
        });
        const query = {
          worldId: world,
          ...(status ? { status } : {}),
          ...(actionType ? { actionType } : {}),
          ...(actor ? { actor } : {}),
          ...(cursor ? { before: cursor } : {}),
          limit: limit + 1,
        };
        const rows: ActionAt[] = point
          ? await listActionsAt(db, { ...query, point })
          : (await listActions(db, query)).map((a) => ({ ...a, inherited: false }));
        const page = rows.slice(0, limit);
        await app.consistencyHeader(reply, world, watermark);
        return {
          actions: page.map((a) => ({
            id: a.id,
            actionType: a.actionType,
            status: a.status,
            actor: a.actor,
            refusal: a.refusal,
            createdAt: a.createdAt,
            updatedAt: a.updatedAt,
            finishedAt: a.finishedAt,
            inherited: a.inherited,
            ...(a.inherited ? { world: a.worldId } : {}),
          })),
          next: rows.length > limit ? (page.at(-1)?.id ?? null) : null,
        };
      },
    );
  },
  {
    name: 'onto-intelligence-actions',
    dependencies: [
      'onto-auth',
      'onto-consumers',
      'onto-intelligence-schema',
      'onto-intelligence-consistency',
      'onto-jobs',
    ],
  },
);
