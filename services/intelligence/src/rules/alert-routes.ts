import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { NotFound, WORLD_ID } from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { errors, idKeyset, NAME, notProvisioned, provisioned, ReadHeaders, UUID } from '../http.js';
import { ALERT_COLUMNS, type Alert } from './alerts.js';
import { ALERT_TYPE, SEVERITIES } from './model.js';

const AlertView = Type.Object({
  id: Type.String(),
  rule: Type.String(),
  ruleVersion: Type.Integer(),
  alertType: Type.String(),
  severity: Type.String(),
  objectType: Type.String(),
  pk: Type.String(),
  status: Type.Union([Type.Literal('OPEN'), Type.Literal('CLEARED')]),
  raisedAt: Type.String(),
  raisedObjectVersion: Type.Integer(),
  clearedAt: Type.Union([Type.String(), Type.Null()]),
  clearedObjectVersion: Type.Union([Type.Integer(), Type.Null()]),
  clearReason: Type.Union([Type.String(), Type.Null()]),
});

const view = ({ worldId: _, ...alert }: Alert) => alert;

/** `GET /v1/worlds/{world}/alerts` (filters, newest first, cursor) and `GET …/alerts/{id}`. */
export async function alertRoutes(fastify: FastifyInstance) {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/v1/worlds/:world/alerts',
    {
      preHandler: app.authorize({ role: 'viewer' }),
      schema: {
        tags: ['alerts'],
        summary: 'List alerts, newest first',
        params: Type.Object({ world: Type.String({ pattern: WORLD_ID }) }),
        headers: ReadHeaders,
        querystring: Type.Object(
          {
            status: Type.Optional(Type.Union([Type.Literal('OPEN'), Type.Literal('CLEARED')])),
            rule: Type.Optional(Type.String({ pattern: NAME })),
            alertType: Type.Optional(Type.String({ pattern: ALERT_TYPE })),
            severity: Type.Optional(Type.Union(SEVERITIES.map((s) => Type.Literal(s)))),
            objectType: Type.Optional(Type.String({ pattern: NAME })),
            pk: Type.Optional(Type.String({ minLength: 1, maxLength: 1024 })),
            cursor: Type.Optional(Type.String({ maxLength: 512 })),
            limit: Type.Integer({ minimum: 1, maximum: 1000, default: 100 }),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({
            alerts: Type.Array(AlertView),
            next: Type.Union([Type.String(), Type.Null()], { description: 'the cursor of the next page' }),
          }),
          ...errors,
        },
      },
    },
    async (request, reply) => {
      const { world } = request.params;
      const q = request.query;
      const watermark = await app.awaitConsistency(request, world);
      const filters = {
        status: q.status,
        rule: q.rule,
        alertType: q.alertType,
        severity: q.severity,
        objectType: q.objectType,
        pk: q.pk,
      };
      const listing = JSON.stringify(filters);
      const keyset = idKeyset(q.cursor, listing, q.limit);
      if (!(await provisioned(app.pg, world))) throw notProvisioned(world);
      const { rows } = await app.pg.query<Alert>(
        `SELECT ${ALERT_COLUMNS} FROM alerts
          WHERE world_id = $1 AND ($2::text IS NULL OR status = $2) AND ($3::text IS NULL OR rule = $3)
            AND ($4::text IS NULL OR alert_type = $4) AND ($5::text IS NULL OR severity = $5)
            AND ($6::text IS NULL OR object_type = $6) AND ($7::text IS NULL OR pk = $7)
            AND ($8::uuid IS NULL OR id < $8)
          ORDER BY id DESC LIMIT $9`,
        [
          world,
          q.status ?? null,
          q.rule ?? null,
          q.alertType ?? null,
          q.severity ?? null,
          q.objectType ?? null,
          q.pk ?? null,
          keyset.after,
          q.limit + 1,
        ],
      );
      const { page, next } = keyset.page(rows);
      await app.consistencyHeader(reply, world, watermark);
      return { alerts: page.map(view), next };
    },
  );

  app.get(
    '/v1/worlds/:world/alerts/:id',
    {
      preHandler: app.authorize({ role: 'viewer' }),
      schema: {
        tags: ['alerts'],
        summary: 'Read an alert',
        params: Type.Object({ world: Type.String({ pattern: WORLD_ID }), id: Type.String({ pattern: UUID }) }),
        headers: ReadHeaders,
        response: { 200: AlertView, ...errors },
      },
    },
    async (request, reply) => {
      const { world, id } = request.params;
      const watermark = await app.awaitConsistency(request, world);
      const { rows } = await app.pg.query<Alert>(
        `SELECT ${ALERT_COLUMNS} FROM alerts WHERE world_id = $1 AND id = $2`,
        [world, id],
      );
      const alert = rows[0];
      if (!alert) throw new NotFound(`alert ${id} is not in ${world}`);
      await app.consistencyHeader(reply, world, watermark);
      return view(alert);
    },
  );
}
