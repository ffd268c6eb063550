import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  consistencyToken,
  Headers,
  NotFound,
  problemResponses,
  type Queryable,
  SchemaReplica,
  WORLD_ID,
} from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { IndexBuilder } from './indexes.js';
import { notProvisioned } from './lookup.js';
import { applySchemaEvents } from './replica.js';

declare module 'fastify' {
  interface FastifyInstance {
    schemaReplica: SchemaReplica;
    /**
     * Honours the request's `X-Consistency-Token`: a `control=<v>` entry waits (bounded) until
     * this world's schema replica has applied v, else 503 with Retry-After. `data=<n>` is always
     * satisfied: data's own writes are visible to every later read here. Not named
     * `awaitConsistency`: intelligence's, which answers a watermark, augments the same interface.
     */
    awaitSchemaConsistency(request: FastifyRequest, worldId: string): Promise<void>;
  }
}

/** Whether data has provisioned the world or applied any of its schema. */
async function worldKnown(db: Queryable, worldId: string): Promise<boolean> {
  const { rows } = await db.query<{ known: boolean }>(
    `SELECT EXISTS (SELECT 1 FROM worlds WHERE id = $1) OR EXISTS (SELECT 1 FROM schema_versions WHERE world_id = $1) AS known`,
    [worldId],
  );
  return rows[0]?.known === true;
}

/**
 * data's replica of every world's schema (consumer `data-schema` on onto.schema), the indexes
 * its indexed properties need, and how far it is: `GET /v1/worlds/{world}/schema-version`.
 */
export default fp(
  async (fastify: FastifyInstance, opts: { waitBoundMs: number }) => {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
    const replica = new SchemaReplica(app.pg, opts.waitBoundMs);
    app.decorate('schemaReplica', replica);
    app.decorate('awaitSchemaConsistency', async (request: FastifyRequest, worldId: string) => {
      const wanted = consistencyToken(request).control;
      if (wanted === undefined) return;
      // A world data has never heard of is a 404 now, not a 503 after the whole wait.
      if (!(await worldKnown(app.pg, worldId))) throw notProvisioned(worldId);
      await replica.awaitVersion(worldId, wanted);
    });

    app.addConsumer({
      name: 'data-schema',
      topics: ['onto.schema'],
      apply: applySchemaEvents(app.topicPrefix, app.log.child({ component: 'schema-replica' })),
    });

    new IndexBuilder(app.pg, app.log.child({ component: 'index-builder' })).register(app.jobs);

    app.get(
      '/v1/worlds/:world/schema-version',
      {
        preHandler: app.authorize({ role: 'viewer' }),
        schema: {
          tags: ['schema'],
          summary: "The version of the world's schema that data has applied",
          params: Type.Object({ world: Type.String({ pattern: WORLD_ID }) }),
          headers: Type.Object({ 'x-consistency-token': Headers.consistencyToken() }),
          response: {
            200: Type.Object({
              world: Type.String(),
              version: Type.Integer({ description: '0 before the first schema.updated' }),
              appliedAt: Type.Union([Type.String(), Type.Null()]),
            }),
            ...problemResponses(400, 401, 403, 404, 503),
          },
        },
      },
      async (request) => {
        const { world } = request.params;
        await app.awaitSchemaConsistency(request, world);
        const { rows } = await app.pg.query<{ provisioned: boolean; version: number; appliedAt: string | null }>(
          `SELECT EXISTS (SELECT 1 FROM worlds WHERE id = $1) AS provisioned,
                  coalesce(v.version, 0) AS version, to_json(v.received_at)#>>'{}' AS "appliedAt"
             FROM (SELECT 1) AS one
             LEFT JOIN LATERAL (SELECT version, received_at FROM schema_versions WHERE world_id = $1
                                 ORDER BY version DESC LIMIT 1) v ON true`,
          [world],
        );
        const row = rows[0];
        if (!row?.provisioned && row?.version === 0) throw new NotFound(`world ${world} is not provisioned in data`);
        return { world, version: row?.version ?? 0, appliedAt: row?.appliedAt ?? null };
      },
    );
  },
  { name: 'onto-data-schema', dependencies: ['onto-auth', 'onto-consumers', 'onto-jobs'] },
);
