import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  awaitApplied,
  consistencyToken,
  Headers,
  NotFound,
  problemResponses,
  type Queryable,
  type ReadOptions,
  replicaVersion,
  type Statement,
  Unprocessable,
  WORLD_ID,
} from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import type pg from 'pg';
import { awaitBase, type Base, coveredThroughChain } from './readmodel/chain.js';
import { type At, resolveAt, stateAt } from './worlds/ref.js';

/** A read at a ref (`?at=`) of intelligence's own state: the data commit, the definition position and the moment. */
export interface ReadPoint {
  commit: number;
  definitions: number;
  moment: number;
}

declare module 'fastify' {
  interface FastifyInstance {
    /**
     * Honours the request's `X-Consistency-Token`: `data=<n>` waits (bounded) until intelligence
     * has applied the world's data changes up to write n; `control=<v>` until its schema replica
     * has applied version v; else 503 with Retry-After. Answers the watermark it saw.
     */
    awaitConsistency(request: FastifyRequest, worldId: string): Promise<number>;
    /** Waits (bounded, then 503) until intelligence has applied the world's data up to write n, itself or through its chain. */
    awaitDataApplied(worldId: string, n: number): Promise<number>;
    /** Sets `X-Consistency-Token: data=<watermark>` — what this answer reflects of data. */
    consistencyHeader(reply: FastifyReply, worldId: string, watermark?: number): Promise<void>;
    /** The world's base (docs/adr/0033), waiting (bounded) while a fork's commit is not recorded yet. */
    awaitBase(worldId: string): Promise<Base>;
    /** Resolves a read's `?at=` (worlds/ref.ts resolveAt), a PENDING tag waiting as long as a consistency token. */
    resolveAt(worldId: string, raw: string, field?: string): Promise<At>;
    /**
     * A list read's `?at=` (undefined: now): the ref resolved (resolveAt; 404 for a world not
     * provisioned, 422 before a fork's fork point), the world's data applied up to it (bounded
     * wait), and the definition position and moment a fork at it would start from (worlds/fork.ts stateAt).
     */
    readPoint(worldId: string, raw: string | undefined): Promise<ReadPoint | undefined>;
    /**
     * Where a read goes once its token is met and its ref resolved, both on the primary
     * (docs/adr/0080): `app.readDb` (a ref or commit resolved: `primaryNow`), and the watermark
     * its answer names — on a replica its own, read before the read: the primary's may be ahead
     * of what a read without a token finds there.
     */
    readModelDb(
      request: FastifyRequest,
      worldId: string,
      watermark: number,
      options?: ReadOptions,
    ): Promise<{ db: pg.Pool; watermark: number }>;
  }
}

/** Raises the world's data watermark to `seq` (never lowers it), in the applying transaction. */
export async function advanceDataWatermark(tx: Queryable, worldId: string, seq: number): Promise<void> {
  await tx.query(
    `INSERT INTO data_watermarks (world_id, seq) VALUES ($1, $2)
     ON CONFLICT (world_id) DO UPDATE SET seq = excluded.seq, updated_at = now()
       WHERE data_watermarks.seq < excluded.seq`,
    [worldId, seq],
  );
}

/** The same for a batch, as one statement for every world the batch touched. */
export function advancingDataWatermarks(seqs: Map<string, number>): Statement {
  return {
    text: `INSERT INTO data_watermarks (world_id, seq)
     SELECT w, s FROM unnest($1::text[], $2::bigint[]) AS t(w, s)
     ON CONFLICT (world_id) DO UPDATE SET seq = excluded.seq, updated_at = now()
       WHERE data_watermarks.seq < excluded.seq`,
    values: [[...seqs.keys()], [...seqs.values()]],
  };
}

export async function dataWatermark(db: Queryable, worldId: string): Promise<number> {
  const { rows } = await db.query<{ seq: string }>('SELECT seq FROM data_watermarks WHERE world_id = $1', [worldId]);
  return rows[0] ? Number(rows[0].seq) : 0;
}

/** Whether intelligence has provisioned the world, applied any of its schema or any of its data. */
async function worldKnown(db: Queryable, worldId: string): Promise<boolean> {
  const { rows } = await db.query<{ known: boolean }>(
    `SELECT EXISTS (SELECT 1 FROM worlds WHERE id = $1) OR EXISTS (SELECT 1 FROM schema_versions WHERE world_id = $1)
         OR EXISTS (SELECT 1 FROM data_watermarks WHERE world_id = $1) AS known`,
    [worldId],
  );
  return rows[0]?.known === true;
}

/**
 * The consistency token's two decorators and `GET /v1/worlds/{world}/watermarks`: how far
 * intelligence has applied the world's schema (control's version) and data's writes.
 */
export default fp(
  async (fastify: FastifyInstance, opts: { waitBoundMs: number }) => {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
    const pool: pg.Pool = app.pg;
    app.decorate('awaitConsistency', async (request: FastifyRequest, worldId: string) => {
      const token = consistencyToken(request);
      // A world intelligence has never heard of is a 404 now, not a 503 after the whole wait.
      if ((token.control !== undefined || token.data !== undefined) && !(await worldKnown(pool, worldId))) {
        throw new NotFound(`world ${worldId} is not provisioned in intelligence`);
      }
      if (token.control !== undefined) await app.schemaReplica.awaitVersion(worldId, token.control);
      if (token.data === undefined) return dataWatermark(pool, worldId);
      return awaitData(worldId, token.data);
    });
    const awaitData = (worldId: string, wanted: number) =>
      awaitApplied(
        async () => {
          const own = await dataWatermark(pool, worldId);
          // A write the fork inherits (a base's, at or before the fork point) is covered when
          // that base has applied it; only asked while the world itself has not.
          if (own >= wanted || !(await coveredThroughChain(pool, worldId, wanted))) return own;
          return wanted;
        },
        wanted,
        { boundMs: opts.waitBoundMs, poll: { initialMs: 5, maxMs: 100 } },
        (have) => `intelligence has applied data of ${worldId} up to write ${have}, not yet ${wanted}; retry shortly`,
      );
    app.decorate('awaitDataApplied', awaitData);
    app.decorate('awaitBase', (worldId: string) => awaitBase(pool, worldId, opts.waitBoundMs));
    app.decorate('resolveAt', (worldId: string, raw: string, field?: string) =>
      resolveAt(pool, worldId, raw, opts.waitBoundMs, field),
    );
    app.decorate('readPoint', async (worldId: string, raw: string | undefined) => {
      if (raw === undefined) return undefined;
      const { rows } = await pool.query('SELECT 1 FROM worlds WHERE id = $1', [worldId]);
      if (rows.length === 0) throw new NotFound(`world ${worldId} is not provisioned in intelligence`);
      const at = await resolveAt(pool, worldId, raw, opts.waitBoundMs);
      const base = await awaitBase(pool, worldId, opts.waitBoundMs);
      if (base.kind === 'known' && at.commit < base.seq) {
        throw new Unprocessable(
          `${worldId} was forked from ${base.world} at commit ${base.seq}: it has no commit ${at.commit}`,
          [{ path: 'querystring/at', message: `must be at or after the fork point, ${base.seq}` }],
        );
      }
      await awaitData(worldId, at.needs);
      return { commit: at.commit, ...(await stateAt(pool, worldId, at.commit)) };
    });
    app.decorate('readModelDb', async (request: FastifyRequest, worldId: string, watermark: number, options = {}) => {
      const db = await app.readDb(request, options);
      return { db, watermark: db === pool ? watermark : await dataWatermark(db, worldId) };
    });
    app.decorate('consistencyHeader', async (reply: FastifyReply, worldId: string, watermark?: number) => {
      reply.header('x-consistency-token', `data=${watermark ?? (await dataWatermark(pool, worldId))}`);
    });

    app.get(
      '/v1/worlds/:world/watermarks',
      {
        preHandler: app.authorize({ role: 'viewer' }),
        schema: {
          tags: ['consistency'],
          summary: "How far intelligence has applied the world's schema and data changes",
          description:
            'Accepts X-Consistency-Token (control=<v>, data=<n>) and waits, bounded, until both are applied; answers X-Consistency-Token: data=<n>.',
          params: Type.Object({ world: Type.String({ pattern: WORLD_ID }) }),
          headers: Type.Object({ 'x-consistency-token': Headers.consistencyToken() }),
          response: {
            200: Type.Object({
              world: Type.String(),
              schemaVersion: Type.Integer({
                description: "control's schema version applied here (0 before the first)",
              }),
              dataSeq: Type.Integer({ description: 'the highest data write applied here (0 before the first)' }),
            }),
            ...problemResponses(400, 401, 403, 404, 503),
          },
        },
      },
      async (request, reply) => {
        const { world } = request.params;
        const dataSeq = await app.awaitConsistency(request, world);
        const { rows } = await pool.query<{ provisioned: boolean }>(
          'SELECT EXISTS (SELECT 1 FROM worlds WHERE id = $1) AS provisioned',
          [world],
        );
        const schemaVersion = await replicaVersion(pool, world);
        if (!rows[0]?.provisioned && schemaVersion === 0 && dataSeq === 0) {
          throw new NotFound(`world ${world} is not provisioned in intelligence`);
        }
        await app.consistencyHeader(reply, world, dataSeq);
        return { world, schemaVersion, dataSeq };
      },
    );
  },
  {
    name: 'onto-intelligence-consistency',
    dependencies: ['onto-auth', 'onto-intelligence-schema', 'onto-postgres-replicas'],
  },
);
