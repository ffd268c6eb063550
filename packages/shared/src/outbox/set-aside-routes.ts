import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { BODY_LIMITS } from '../config/body-limits.js';
import { problemResponses } from '../errors/problem.js';
import { recordAudit } from './audit.js';
import { redriveSetAside } from './relay.js';

/** Set-aside events listed per page: a broker that refuses a whole topic never makes one giant answer. */
const PAGE_LIMIT = 500;

const SetAsideEvent = Type.Object({
  id: Type.Integer({ description: 'the set-aside row, as `redrive` takes it' }),
  eventId: Type.String(),
  topic: Type.String(),
  key: Type.String(),
  reason: Type.String({ description: "the broker's refusal" }),
  bytes: Type.Integer({ description: "the event's body in bytes" }),
  setAsideAt: Type.String({ format: 'date-time' }),
});

/**
 * `GET /v1/admin/outbox/set-aside` and `POST /v1/admin/outbox/set-aside/redrive`: the events the
 * broker refused for good (outbox_set_aside) that wait for a redrive, and their redrive once the
 * cause is fixed, for onto-admin's `outbox set-aside` (admin only). Every service with an outbox.
 */
export async function outboxSetAsideRoutes(fastify: FastifyInstance): Promise<void> {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
  app.get(
    '/v1/admin/outbox/set-aside',
    {
      preHandler: app.authorize({ admin: true }),
      schema: {
        tags: ['admin'],
        summary: 'The events of this service the broker refused for good, waiting for a redrive, oldest first',
        querystring: Type.Object(
          {
            // Bounded: an integer past bigint reached PostgreSQL as "1e+30" and failed there with a 500.
            after: Type.Optional(
              Type.Integer({
                minimum: 0,
                maximum: Number.MAX_SAFE_INTEGER,
                description: 'the last id of the previous page',
              }),
            ),
            limit: Type.Integer({ minimum: 1, maximum: PAGE_LIMIT, default: 100 }),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({
            events: Type.Array(SetAsideEvent),
            next: Type.Union([Type.Integer(), Type.Null()], { description: 'the next page’s `after`, if any' }),
          }),
          ...problemResponses(400, 401, 403),
        },
      },
    },
    async (request) => {
      const { after = 0, limit } = request.query;
      const { rows } = await app.pg.query<{
        id: string;
        event_id: string;
        topic: string;
        partition_key: string;
        reason: string;
        bytes: number;
        set_aside_at: Date;
      }>(
        `SELECT id::text, event_id::text, topic, partition_key, reason, octet_length(body) AS bytes, set_aside_at
           FROM outbox_set_aside WHERE redriven_at IS NULL AND id > $1 ORDER BY id LIMIT $2`,
        [after, limit + 1],
      );
      const page = rows.slice(0, limit);
      return {
        events: page.map((r) => ({
          id: Number(r.id),
          eventId: r.event_id,
          topic: r.topic,
          key: r.partition_key,
          reason: r.reason,
          bytes: r.bytes,
          setAsideAt: r.set_aside_at.toISOString(),
        })),
        next: rows.length > limit ? Number(page.at(-1)?.id) : null,
      };
    },
  );
  app.post(
    '/v1/admin/outbox/set-aside/redrive',
    {
      bodyLimit: BODY_LIMITS.eventIds,
      preHandler: app.authorize({ admin: true }),
      schema: {
        tags: ['admin'],
        summary:
          'Put set-aside events back in the outbox (all waiting ones, or those of ids), once their cause is fixed',
        body: Type.Object(
          {
            ids: Type.Optional(
              // Bounded as `after` is: 1e21 or 2^63 - 1 reached PostgreSQL as text it refused, a 500.
              Type.Array(Type.Integer({ minimum: 1, maximum: Number.MAX_SAFE_INTEGER }), {
                minItems: 1,
                maxItems: 10_000,
                description: 'set-aside ids (GET /v1/admin/outbox/set-aside); omitted: every waiting one',
              }),
            ),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({ redriven: Type.Integer({ description: 'events put back in the outbox' }) }),
          ...problemResponses(400, 401, 403),
        },
      },
    },
    async (request) => {
      const redriven = await redriveSetAside(app.pg, request.body.ids, (tx, count) =>
        recordAudit(tx, request, {
          action: 'admin.outbox.redrive',
          result: count > 0 ? 'updated' : 'unchanged',
          detail: { ids: request.body.ids ?? 'all', redriven: count },
        }),
      );
      return { redriven };
    },
  );
}
