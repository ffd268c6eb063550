import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  actorOf,
  BODY_LIMITS,
  Conflict,
  decodeCursor,
  encodeCursor,
  Forbidden,
  HttpProblem,
  inTransaction,
  MERGE_STRATEGIES,
  NotFound,
  OPTIONAL_BODY,
  problemResponses,
  recordAudit,
  Unprocessable,
  WORLD_ID,
} from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type pg from 'pg';
import { protectionOf } from '../worlds/protection.js';
import { approvals, lockMerge, type MergeRow, parts } from './repository.js';
import { resolveConflict } from './resolutions.js';
import { applyNow, approveMerge, type SagaContext, startMerge } from './saga.js';
import {
  type ConflictDbRow,
  Conflict as ConflictView,
  conflictView,
  Merge,
  MergeSummary,
  mergeView,
  summaryView,
} from './views.js';

const errors = problemResponses(400, 401, 403, 404, 409, 422, 503);
const UUID = '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$';
const WorldParams = Type.Object({ world: Type.String({ pattern: WORLD_ID }) });
const MergeParams = Type.Object({ world: Type.String({ pattern: WORLD_ID }), id: Type.String({ pattern: UUID }) });
const CreateMerge = Type.Object(
  {
    source: Type.String({ pattern: WORLD_ID, description: 'the world whose changes are merged' }),
    strategy: Type.Union(
      MERGE_STRATEGIES.map((s) => Type.Literal(s)),
      { description: 'how conflicts are settled: SOURCE_WINS, TARGET_WINS, TIMESTAMP_WINS or MANUAL' },
    ),
    dryRun: Type.Optional(Type.Boolean({ description: 'compute everything, apply nothing', default: false })),
  },
  { additionalProperties: false },
);
const Revert = Type.Object(
  {
    strategy: Type.Optional(
      Type.Union(
        MERGE_STRATEGIES.map((s) => Type.Literal(s)),
        {
          description:
            'how conflicts with later changes are settled (source: the state before the merge; target: the world now); default MANUAL',
          default: 'MANUAL',
        },
      ),
    ),
    dryRun: Type.Optional(Type.Boolean({ description: 'compute everything, apply nothing', default: false })),
  },
  { additionalProperties: false },
);
const Resolve = Type.Object(
  {
    take: Type.Union([Type.Literal('source'), Type.Literal('target'), Type.Literal('value')]),
    value: Type.Optional(
      Type.Unknown({ description: 'with take value: the value, checked against the merged schema' }),
    ),
  },
  { additionalProperties: false },
);

const Approval = Type.Object({
  id: Type.String(),
  status: Type.String({ description: 'PROPOSED: more approvals needed; RUNNING: approved, applying' }),
  approvals: Type.Integer({ description: "approvals of the merge's current plan" }),
  requiredApprovals: Type.Integer(),
});

/** A merge of the target, or 404 (unknown, or a merge of another world). */
async function mergeOf(tx: pg.ClientBase, world: string, id: string): Promise<MergeRow> {
  const merge = await lockMerge(tx, id);
  if (!merge || merge.target !== world) throw new NotFound(`world ${world} has no merge ${id}`);
  return merge;
}

/** The source must exist and the caller see it: its changes are what the merge reads. */
async function checkSource(
  tx: pg.ClientBase,
  source: string,
  target: string,
  principal: { admin?: boolean; roles?: Record<string, string> } | null | undefined,
) {
  if (source === target) {
    throw new Unprocessable(`world ${target} cannot be merged into itself`, [
      { path: '/source', message: 'must be another world than the target' },
    ]);
  }
  const { rows } = await tx.query<{ status: string }>('SELECT status FROM worlds WHERE id = $1 FOR SHARE', [source]);
  const status = rows[0]?.status;
  if (!status || status === 'DELETED') {
    throw new HttpProblem(404, 'not-found', 'Not Found', `world ${source} does not exist`, {
      errors: [{ path: '/source', message: `no world ${source}` }],
    });
  }
  // Own roles only: a world named like a prototype member (`constructor`) is one the caller holds no role in.
  const roles = principal?.roles ?? {};
  if (!principal?.admin && !(Object.hasOwn(roles, source) && roles[source])) {
    throw new Forbidden(`no role in world ${source}`);
  }
  if (status !== 'READY') {
    throw new Conflict(`world ${source} is ${status}, not READY`, {
      errors: [{ path: '/source', message: `must be READY, not ${status}` }],
    });
  }
}

async function checkTarget(tx: pg.ClientBase, target: string) {
  const { rows } = await tx.query<{ status: string }>('SELECT status FROM worlds WHERE id = $1 FOR SHARE', [target]);
  const status = rows[0]?.status;
  if (!status || status === 'DELETED') throw new NotFound(`world ${target} does not exist`);
  if (status !== 'READY') throw new Conflict(`world ${target} is ${status}, not READY`, { worldStatus: status });
}

async function loadMerge(db: pg.Pool, world: string, id: string, cursor: string | undefined, limit: number) {
  const { rows } = await db.query<MergeRow>('SELECT * FROM merges WHERE id = $1 AND target = $2', [id, world]);
  const merge = rows[0];
  if (!merge) throw new NotFound(`world ${world} has no merge ${id}`);
  // Conflicts in a stable order whatever order the services' replies came in: c-, d-, i-, by number.
  const after = decodeCursor(cursor, (v) =>
    typeof v.k === 'string' && Number.isInteger(v.n) ? { k: v.k, n: v.n as number } : undefined,
  ) ?? { k: '', n: 0 };
  const conflicts = await db.query<ConflictDbRow>(
    `SELECT * FROM merge_conflicts
      WHERE merge_id = $1 AND (left(id, 1), split_part(id, '-', 2)::bigint) > ($2::text, $3::bigint)
      ORDER BY left(id, 1), split_part(id, '-', 2)::bigint LIMIT $4`,
    [id, after.k, after.n, limit + 1],
  );
  const page = conflicts.rows.slice(0, limit);
  const counts = await db.query<{ type: string; total: number; unresolved: number }>(
    `SELECT type, count(*)::int AS total, count(*) FILTER (WHERE resolved_at IS NULL)::int AS unresolved
       FROM merge_conflicts WHERE merge_id = $1 GROUP BY type`,
    [id],
  );
  const last = page.at(-1);
  return mergeView(
    merge,
    await parts(db, id),
    page,
    counts.rows,
    {
      next:
        conflicts.rows.length > limit && last
          ? encodeCursor({ k: last.id.slice(0, 1), n: Number(last.id.slice(2)) })
          : null,
    },
    {
      ...(merge.dry_run
        ? { requiredApprovals: 0, requiredChecks: [] }
        : await protectionOf(db, world).then((p) => ({
            requiredApprovals: p.requiredApprovals,
            requiredChecks: p.requiredChecks,
          }))),
      approvals: await approvals(db, merge),
    },
  );
}

/**
 * Merges of worlds (issue 17, docs/adr/0037): `POST` starts the saga, `GET` follows it, `PUT` of a
 * conflict resolves it, `apply` finishes a MANUAL merge, `revert` starts the merge that undoes one
 * (docs/adr/0081).
 */
export default fp(
  async (fastify: FastifyInstance, ctx: SagaContext) => {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

    app.post(
      '/v1/worlds/:world/merges',
      {
        bodyLimit: BODY_LIMITS.small,
        preHandler: app.authorize({ role: 'owner' }),
        schema: {
          tags: ['merges'],
          summary: "Merge a world's changes into this one",
          params: WorldParams,
          body: CreateMerge,
          response: { 202: Type.Object({ id: Type.String(), status: Type.String() }), ...errors },
        },
      },
      async (request, reply) => {
        const target = request.params.world;
        const { source, strategy, dryRun = false } = request.body;
        const id = await inTransaction(app.pg, async (tx) => {
          await checkTarget(tx, target);
          await checkSource(tx, source, target, request.principal);
          const id = await startMerge(tx, ctx, {
            target,
            source,
            strategy,
            dryRun,
            actor: actorOf(request),
            requestId: request.id,
          });
          await recordAudit(tx, request, {
            action: 'merge.start',
            result: 'accepted',
            worldId: target,
            subject: id,
            detail: { source, strategy, dryRun },
          });
          return id;
        });
        reply.code(202).header('location', `/v1/worlds/${target}/merges/${id}`);
        return { id, status: 'RUNNING' };
      },
    );

    app.post(
      '/v1/worlds/:world/merges/:id/revert',
      {
        bodyLimit: BODY_LIMITS.small,
        preHandler: app.authorize({ role: 'owner' }),
        schema: {
          tags: ['merges'],
          summary: 'Revert a MERGED merge: a merge of the inverse of its changes into the same world',
          description:
            'Starts a new merge (202, its id) whose source is this world before the merge and whose base is this world right after it (docs/adr/0081): what the merge changed is set back, and a property changed again since is a conflict settled by the strategy (MANUAL: stops at CONFLICTS, resolved as any merge). 404: no such merge of this world; 409: the merge is not MERGED (or is a dry run), the world is not READY, or a merge is running against it. Nothing is written on a refusal.',
          params: MergeParams,
          body: Revert,
          ...OPTIONAL_BODY,
          response: { 202: Type.Object({ id: Type.String(), status: Type.String() }), ...errors },
        },
      },
      async (request, reply) => {
        const { world, id: reverted } = request.params;
        const { strategy = 'MANUAL', dryRun = false } = request.body;
        const id = await inTransaction(app.pg, async (tx) => {
          await checkTarget(tx, world);
          const merge = await mergeOf(tx, world, reverted);
          const id = await startMerge(tx, ctx, {
            target: world,
            source: world,
            strategy,
            dryRun,
            actor: actorOf(request),
            requestId: request.id,
            reverts: merge,
          });
          await recordAudit(tx, request, {
            action: 'merge.revert',
            result: 'accepted',
            worldId: world,
            subject: id,
            detail: { reverts: reverted, strategy, dryRun },
          });
          return id;
        });
        reply.code(202).header('location', `/v1/worlds/${world}/merges/${id}`);
        return { id, status: 'RUNNING' };
      },
    );

    app.get(
      '/v1/worlds/:world/merges',
      {
        preHandler: app.authorize({ role: 'viewer' }),
        schema: {
          tags: ['merges'],
          summary: 'The merges into this world, newest first',
          params: WorldParams,
          querystring: Type.Object({
            cursor: Type.Optional(Type.String({ maxLength: 200 })),
            limit: Type.Integer({ minimum: 1, maximum: 200, default: 50 }),
          }),
          response: {
            200: Type.Object({ merges: Type.Array(MergeSummary), next: Type.Union([Type.String(), Type.Null()]) }),
            ...errors,
          },
        },
      },
      async (request) => {
        const { world } = request.params;
        await inTransaction(app.pg, (tx) => checkExists(tx, world));
        const before = decodeCursor(request.query.cursor, (v) =>
          typeof v.at === 'string' && typeof v.id === 'string' ? { at: v.at, id: v.id } : undefined,
        );
        const { rows } = await app.pg.query<MergeRow & { at: string; conflicts: number; unresolved: number }>(
          `SELECT m.*, to_json(m.created_at)#>>'{}' AS at,
                  (SELECT count(*)::int FROM merge_conflicts c WHERE c.merge_id = m.id) AS conflicts,
                  (SELECT count(*)::int FROM merge_conflicts c WHERE c.merge_id = m.id AND c.resolved_at IS NULL) AS unresolved
             FROM merges m
            WHERE m.target = $1 AND ($2::timestamptz IS NULL OR (m.created_at, m.id) < ($2::timestamptz, $3::uuid))
            ORDER BY m.created_at DESC, m.id DESC LIMIT $4`,
          [world, before?.at ?? null, before?.id ?? null, request.query.limit],
        );
        const last = rows.at(-1);
        return {
          merges: rows.map((r) => summaryView(r, { total: r.conflicts, unresolved: r.unresolved })),
          next: rows.length === request.query.limit && last ? encodeCursor({ at: last.at, id: last.id }) : null,
        };
      },
    );

    app.get(
      '/v1/worlds/:world/merges/:id',
      {
        preHandler: app.authorize({ role: 'viewer' }),
        schema: {
          tags: ['merges'],
          summary: 'A merge: its state, base, parts, counts and a page of its conflicts',
          params: MergeParams,
          querystring: Type.Object({
            conflicts: Type.Optional(
              Type.String({ maxLength: 200, description: 'the conflictsNext of a previous answer: the next page' }),
            ),
            conflictLimit: Type.Integer({ minimum: 1, maximum: 1000, default: 200 }),
          }),
          response: { 200: Merge, ...errors },
        },
      },
      async (request) =>
        loadMerge(
          app.pg,
          request.params.world,
          request.params.id,
          request.query.conflicts,
          request.query.conflictLimit,
        ),
    );

    app.put(
      '/v1/worlds/:world/merges/:id/conflicts/:conflictId',
      {
        bodyLimit: BODY_LIMITS.object,
        preHandler: app.authorize({ role: 'owner' }),
        schema: {
          tags: ['merges'],
          summary: 'Resolve one conflict of a merge waiting at CONFLICTS',
          params: Type.Object({
            world: Type.String({ pattern: WORLD_ID }),
            id: Type.String({ pattern: UUID }),
            conflictId: Type.String({ pattern: '^[cdi]-[0-9]{1,9}$' }),
          }),
          body: Resolve,
          response: { 200: ConflictView, ...errors },
        },
      },
      async (request) => {
        const { world, id, conflictId } = request.params;
        return inTransaction(app.pg, async (tx) => {
          const merge = await mergeOf(tx, world, id);
          await resolveConflict(tx, app.topicPrefix, merge, conflictId, request.body, actorOf(request));
          await recordAudit(tx, request, {
            action: 'merge.conflict.resolve',
            result: 'updated',
            worldId: world,
            subject: `${id}/${conflictId}`,
            detail: { take: request.body.take },
          });
          const { rows } = await tx.query<ConflictDbRow>(
            'SELECT * FROM merge_conflicts WHERE merge_id = $1 AND id = $2',
            [id, conflictId],
          );
          return conflictView(rows[0] as ConflictDbRow);
        });
      },
    );

    app.post(
      '/v1/worlds/:world/merges/:id/apply',
      {
        bodyLimit: BODY_LIMITS.small,
        preHandler: app.authorize({ role: 'owner' }),
        schema: {
          tags: ['merges'],
          summary: 'Apply a merge whose conflicts are all resolved',
          description:
            'A merge at CONFLICTS with none unresolved applies (202), or, into a world whose protection asks for approvals or checks, becomes a proposal (PROPOSED, docs/adr/0085). A PROPOSED merge with its approvals and checks in whose apply waited for another running merge applies now (or is sent back for a new plan if the target or the source was written since); with approvals or checks missing it is a 409. 409 also: not CONFLICTS or PROPOSED, a dry run, unresolved conflicts, another merge running.',
          params: MergeParams,
          response: { 202: Type.Object({ id: Type.String(), status: Type.String() }), ...errors },
        },
      },
      async (request, reply) => {
        const { world, id } = request.params;
        const status = await inTransaction(app.pg, async (tx) => {
          const merge = await mergeOf(tx, world, id);
          await applyNow(tx, ctx, merge);
          await recordAudit(tx, request, { action: 'merge.apply', result: 'accepted', worldId: world, subject: id });
          return (await lockMerge(tx, id))?.status ?? 'RUNNING';
        });
        reply.code(202);
        return { id, status };
      },
    );

    app.post(
      '/v1/worlds/:world/merges/:id/approve',
      {
        bodyLimit: BODY_LIMITS.small,
        preHandler: app.authorize({ role: 'owner' }),
        schema: {
          tags: ['merges'],
          summary: 'Approve a proposal: a merge waiting at PROPOSED for the approvals its target asks for',
          description:
            "An owner of the world (a user with the owner role in it) approves the merge's current plan (docs/adr/0085). With the approvals the world's protection asks for (requiredApprovals) and its required checks passed (requiredChecks: none of the rules fires on the objects the merge would create or change, see the merge's proposal.checks), the merge applies (202, status RUNNING); before that it stays PROPOSED (200), and applies when the checks pass. If the target or the source was written after the plan read them (data's newest write, a rule, the schema), the approval is not recorded: the merge is sent back for a new plan, its approvals void, and the answer is 409 naming why (the merge's sentBack says it too). 403: not an owner of the world, or the merge's author (rule requiredApprovals); 404: no such merge of this world; 409: the merge is not waiting at PROPOSED, the caller approved this plan already, or another merge is running against the world. Nothing is written on a refusal.",
          params: MergeParams,
          response: {
            200: Approval,
            202: Approval,
            ...errors,
          },
        },
      },
      async (request, reply) => {
        const { world, id } = request.params;
        const approver = actorOf(request);
        const answer = await inTransaction(app.pg, async (tx) => {
          const merge = await mergeOf(tx, world, id);
          const done = await approveMerge(tx, ctx, merge, approver);
          const status = (await lockMerge(tx, id))?.status ?? merge.status;
          await recordAudit(tx, request, {
            action: 'merge.approve',
            result: status === 'RUNNING' ? 'accepted' : 'updated',
            worldId: world,
            subject: id,
            detail: { round: merge.round, approvals: done.approvals, required: done.required, sentBack: done.sentBack },
          });
          return { ...done, status };
        });
        if (answer.sentBack) {
          throw new Conflict(`merge ${id} was sent back for a new plan: ${answer.sentBack}; approve the new plan`, {
            mergeStatus: answer.status,
            sentBack: answer.sentBack,
          });
        }
        reply.code(answer.status === 'RUNNING' ? 202 : 200);
        return { id, status: answer.status, approvals: answer.approvals, requiredApprovals: answer.required };
      },
    );
  },
  { name: 'onto-control-merges', dependencies: ['onto-auth'] },
);

async function checkExists(tx: pg.ClientBase, world: string) {
  const { rows } = await tx.query('SELECT 1 FROM worlds WHERE id = $1 AND status <> $2', [world, 'DELETED']);
  if (rows.length === 0) throw new NotFound(`world ${world} does not exist`);
}
