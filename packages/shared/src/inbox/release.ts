import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import type { Redis } from 'ioredis';
import type pg from 'pg';
import { BODY_LIMITS } from '../config/body-limits.js';
import { inTransaction } from '../db/transaction.js';
import { problemResponses } from '../errors/problem.js';
import { recordAudit } from '../outbox/audit.js';

/**
 * Forgets that a consumer dead-lettered these events (its inbox rows and Redis `done` markers),
 * so that a redrive of them from `<topic>.dlq` is applied rather than skipped as a duplicate.
 * Only dead-lettered events: an applied one stays applied. Returns the ids released.
 */
export async function releaseDeadLettered(
  pool: pg.Pool | pg.PoolClient,
  redis: Redis | undefined,
  consumer: string,
  eventIds: string[],
): Promise<string[]> {
  if (eventIds.length === 0) return [];
  const { rows } = await pool.query<{ event_id: string; scope: string }>(
    `WITH released AS (
       DELETE FROM inbox WHERE consumer = $1 AND event_id = ANY($2::uuid[]) AND outcome = 'dead_lettered'
       RETURNING event_id::text
     )
     SELECT r.event_id, m.inbox_epoch::text || '-' || d.oid::text AS scope
       FROM released r, kernel_meta m, pg_database d WHERE d.datname = current_database()`,
    [consumer, eventIds],
  );
  // The markers' keys as ProcessedCache names them.
  if (redis && rows.length > 0) await redis.del(...rows.map((r) => `onto:inbox:${r.scope}:${consumer}:${r.event_id}`));
  return rows.map((r) => r.event_id);
}

/** `POST /v1/admin/inbox/release`: releaseDeadLettered for onto-admin's `dlq redrive` (admin only). */
export async function inboxReleaseRoute(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  app.post(
    '/v1/admin/inbox/release',
    {
      bodyLimit: BODY_LIMITS.eventIds,
      preHandler: app.authorize({ admin: true }),
      schema: {
        tags: ['admin'],
        summary: 'Forget that a consumer of this service dead-lettered these events, before they are redriven',
        body: Type.Object(
          {
            consumer: Type.String({ minLength: 1, description: 'the consumer group (the onto-consumer header)' }),
            eventIds: Type.Array(Type.String({ format: 'uuid' }), { maxItems: 10_000 }),
          },
          { additionalProperties: false },
        ),
        response: { 200: Type.Object({ released: Type.Array(Type.String()) }), ...problemResponses(400, 401, 403) },
      },
    },
    async (request) => {
      const { consumer, eventIds } = request.body;
      const released = await inTransaction(app.pg, async (tx) => {
        const ids = await releaseDeadLettered(tx, app.redis, consumer, eventIds);
        await recordAudit(tx, request, {
          action: 'admin.inbox.release',
          result: ids.length > 0 ? 'deleted' : 'unchanged',
          subject: consumer,
          detail: { released: ids.length },
        });
        return ids;
      });
      return { released };
    },
  );
}
