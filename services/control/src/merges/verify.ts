/**
 * merge-verify (docs/adr/0037): `POST /v1/admin/worlds/{target}/merges/{id}/verify` recomputes
 * control's schema part of a MERGED merge from its base, source and target points and compares it
 * with the target's schema at the merge commit, and asks data and intelligence to do the same with
 * theirs; `GET` of it shows each service's checked, differences and sample as they come in.
 */
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  actorOf,
  BODY_LIMITS,
  Conflict,
  canonicalJson,
  inTransaction,
  NotFound,
  problemResponses,
  recordAudit,
  uuidv7,
  WORLD_ID,
} from '@onto/shared';
import { type TSchema, Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type pg from 'pg';
import { emit, lockMerge, type MergeRow, schemaAt } from './repository.js';
import { resolveSchema } from './resolutions.js';
import { computeSchemaPart } from './saga.js';

const Nullable = <T extends TSchema>(t: T) => Type.Union([t, Type.Null()]);
const Report = Type.Object({
  checked: Type.Integer(),
  differences: Type.Integer(),
  sample: Type.Array(Type.Object({ entity: Type.Unknown(), expected: Type.Unknown(), actual: Type.Unknown() })),
});
const Verification = Type.Object({
  id: Type.String(),
  merge: Type.String(),
  createdAt: Type.String(),
  complete: Type.Boolean({ description: 'every service has reported' }),
  differences: Type.Integer({ description: 'the sum over the services that reported' }),
  services: Type.Object({ control: Report, data: Nullable(Report), intelligence: Nullable(Report) }),
});
const Params = Type.Object({
  world: Type.String({ pattern: WORLD_ID }),
  id: Type.String({ pattern: '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$' }),
});

/** control's own check: the recomputed merged schema against the target's at the merge commit. */
export async function verifySchemaPart(db: pg.ClientBase, merge: MergeRow) {
  const recomputed = await computeSchemaPart(db, {
    source: merge.source,
    target: merge.target,
    strategy: merge.strategy,
    base: merge.base,
    sourceVersion: merge.source_schema_version,
    targetVersion: merge.target_schema_version,
  });
  let expected = recomputed.document;
  const { rows } = await db.query<{
    entity: Record<string, unknown>;
    source: unknown;
    target: unknown;
    take: string;
    value: unknown;
  }>(
    `SELECT entity, source, target, resolution_take AS take, resolution_value AS value FROM merge_conflicts
      WHERE merge_id = $1 AND id LIKE 'c-%' AND resolution_take IS NOT NULL ORDER BY seq`,
    [merge.id],
  );
  for (const r of rows) expected = resolveSchema(expected, r, r.take, r.value);
  const actual = await schemaAt(db, merge.target, merge.result?.schemaVersion ?? merge.target_schema_version);
  const sample: { entity: unknown; expected: unknown; actual: unknown }[] = [];
  let checked = 0;
  let differences = 0;
  for (const kind of ['objectTypes', 'linkTypes', 'actionTypes'] as const) {
    const e = expected[kind] as Record<string, unknown>;
    const a = actual[kind] as Record<string, unknown>;
    for (const apiName of new Set([...Object.keys(e), ...Object.keys(a)])) {
      checked++;
      // The union of both sides' names: one side may lack a type named like a prototype member.
      const want = (Object.hasOwn(e, apiName) ? e[apiName] : undefined) ?? null;
      const got = (Object.hasOwn(a, apiName) ? a[apiName] : undefined) ?? null;
      if (canonicalJson(want) === canonicalJson(got)) continue;
      differences++;
      if (sample.length < 50)
        sample.push({ entity: { kind: kind.slice(0, -1), apiName }, expected: want, actual: got });
    }
  }
  return { checked, differences, sample };
}

type ReportRow = { checked: number; differences: number; sample: unknown[] };
interface VerificationRow {
  id: string;
  merge_id: string;
  created_at: Date;
  control: ReportRow;
  data: ReportRow | null;
  intelligence: ReportRow | null;
}

const view = (v: VerificationRow) => ({
  id: v.id,
  merge: v.merge_id,
  createdAt: new Date(v.created_at).toISOString(),
  complete: v.data !== null && v.intelligence !== null,
  differences: [v.control, v.data, v.intelligence].reduce((n, r) => n + (r?.differences ?? 0), 0),
  services: { control: v.control, data: v.data, intelligence: v.intelligence },
});

export default fp(
  async (fastify: FastifyInstance) => {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
    const errors = problemResponses(400, 401, 403, 404, 409, 503);
    const mergeOf = async (tx: pg.ClientBase, world: string, id: string) => {
      const merge = await lockMerge(tx, id);
      if (!merge || merge.target !== world) throw new NotFound(`world ${world} has no merge ${id}`);
      return merge;
    };

    app.post(
      '/v1/admin/worlds/:world/merges/:id/verify',
      {
        bodyLimit: BODY_LIMITS.small,
        preHandler: app.authorize({ admin: true }),
        schema: {
          tags: ['admin'],
          summary: 'merge-verify: recompute a MERGED merge and compare it with the target',
          params: Params,
          response: { 202: Verification, ...errors },
        },
      },
      async (request, reply) => {
        const { world, id } = request.params;
        const row = await inTransaction(app.pg, async (tx) => {
          const merge = await mergeOf(tx, world, id);
          if (merge.status !== 'MERGED' || merge.dry_run) {
            throw new Conflict(
              `merge ${id} is ${merge.status}${merge.dry_run ? ' (a dry run)' : ''}: only a MERGED merge is verified`,
              {
                mergeStatus: merge.status,
              },
            );
          }
          const verification = uuidv7();
          const control = await verifySchemaPart(tx, merge);
          const { rows } = await tx.query<VerificationRow>(
            `INSERT INTO merge_verifications (id, merge_id, requested_by, control) VALUES ($1, $2, $3, $4) RETURNING *`,
            [verification, id, actorOf(request), control],
          );
          await emit(
            tx,
            app.topicPrefix,
            'world.merge.verify.requested',
            world,
            { merge: merge.plan_id, verification },
            request.id,
          );
          await recordAudit(tx, request, {
            action: 'admin.merge.verify',
            result: 'accepted',
            worldId: world,
            subject: id,
            detail: { verification },
          });
          return rows[0] as VerificationRow;
        });
        reply.code(202);
        return view(row);
      },
    );

    app.get(
      '/v1/admin/worlds/:world/merges/:id/verify',
      {
        preHandler: app.authorize({ admin: true }),
        schema: {
          tags: ['admin'],
          summary: "merge-verify: the latest verification of a merge, with each service's report",
          params: Params,
          response: { 200: Verification, ...errors },
        },
      },
      async (request) => {
        const { world, id } = request.params;
        const { rows } = await app.pg.query<VerificationRow>(
          `SELECT v.* FROM merge_verifications v JOIN merges m ON m.id = v.merge_id
            WHERE v.merge_id = $1 AND m.target = $2 ORDER BY v.created_at DESC, v.id DESC LIMIT 1`,
          [id, world],
        );
        if (!rows[0]) throw new NotFound(`merge ${id} of ${world} has not been verified`);
        return view(rows[0]);
      },
    );
  },
  { name: 'onto-control-merge-verify', dependencies: ['onto-auth'] },
);
