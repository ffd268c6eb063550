import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { NotFound, WORLD_ID } from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { AtState, idKeyset, NAME, notProvisioned, provisioned, ReadHeaders, readErrors, UUID } from '../http.js';
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
  inherited: Type.Boolean({
    description:
      "true for a base's alert that was open at the fork point, on an object this fork has not written since (read-only: nothing here acts on it)",
  }),
  world: Type.Optional(Type.String({ description: 'the base world an inherited alert is of' })),
});

const view = ({ worldId: _, ...alert }: Alert) => ({ ...alert, inherited: false });
const inheritedView = ({ worldId, ...alert }: Alert) => ({ ...alert, inherited: true, world: worldId });

/**
 * A world's alerts at a point (`?at=`: $11 a data commit, $12 a moment, docs/adr/0045, 0046; both
 * NULL: now), and in a fork its bases' too. The world's own: those raised by the point on both
 * axes (`raised_data_seq <= $11`, `raised_seq <= $12`), CLEARED if cleared by it on both, else
 * OPEN as they were then. Its bases' (each at its fork point, and no later than the point): those
 * open at the fork point — raised by then and not cleared by then, on data's scale and in
 * intelligence's order (the moment the fork copied its definitions): an alert a base raised after
 * the fork, even on data the fork inherits (a rule made since), is not the fork's, and one it
 * cleared after the fork stays open in the fork until the fork's own evaluation decides — on
 * objects no nearer world of the chain wrote by its point, and of rules the fork has no open
 * alert of on them — shown as they were then (OPEN). Ordered and paged by id like the world's
 * own; $10, when given, is the one alert id read.
 */
const ALERTS_AT = `WITH RECURSIVE ch(world_id, point, moment, depth) AS (
    SELECT $1::text, $11::bigint, $12::bigint, 0
    UNION ALL
    SELECT b.base_world, least(b.base_seq, ch.point), least(f.moment, ch.moment), ch.depth + 1
      FROM ch JOIN world_bases b ON b.world_id = ch.world_id
      LEFT JOIN fork_points f ON f.world_id = ch.world_id
     WHERE ch.depth < 64
  ), own AS (
    SELECT a.*,
           CASE WHEN $11::bigint IS NULL THEN a.status = 'CLEARED'
                ELSE a.cleared_seq IS NOT NULL AND a.cleared_data_seq <= $11::bigint AND a.cleared_seq <= $12::bigint
           END AS cleared_then
      FROM alerts a
     WHERE a.world_id = $1 AND ($11::bigint IS NULL OR (a.raised_data_seq <= $11::bigint AND a.raised_seq <= $12::bigint))
  )
  SELECT * FROM (
    SELECT o.id::text, o.world_id AS "worldId", o.rule, o.rule_version AS "ruleVersion", o.alert_type AS "alertType",
           o.severity, o.object_type AS "objectType", o.pk, CASE WHEN o.cleared_then THEN 'CLEARED' ELSE 'OPEN' END AS status,
           to_json(o.raised_at)#>>'{}' AS "raisedAt", o.raised_object_version::float8 AS "raisedObjectVersion",
           CASE WHEN o.cleared_then THEN to_json(o.cleared_at)#>>'{}' END AS "clearedAt",
           CASE WHEN o.cleared_then THEN o.cleared_object_version::float8 END AS "clearedObjectVersion",
           CASE WHEN o.cleared_then THEN o.clear_reason END AS "clearReason", false AS inherited
      FROM own o
     WHERE ($2::text IS NULL OR $2 = CASE WHEN o.cleared_then THEN 'CLEARED' ELSE 'OPEN' END)
    UNION ALL
    SELECT a.id::text, a.world_id AS "worldId", a.rule, a.rule_version AS "ruleVersion", a.alert_type AS "alertType",
           a.severity, a.object_type AS "objectType", a.pk, 'OPEN' AS status,
           to_json(a.raised_at)#>>'{}' AS "raisedAt", a.raised_object_version::float8 AS "raisedObjectVersion",
           NULL AS "clearedAt", NULL::float8 AS "clearedObjectVersion", NULL AS "clearReason", true AS inherited
      FROM ch c
      JOIN alerts a ON a.world_id = c.world_id
     WHERE c.depth > 0 AND ($2::text IS NULL OR $2 = 'OPEN')
       AND a.raised_data_seq <= c.point AND (c.moment IS NULL OR a.raised_seq <= c.moment)
       AND (a.cleared_data_seq IS NULL OR a.cleared_data_seq > c.point OR a.cleared_seq > c.moment)
       AND NOT EXISTS (SELECT 1 FROM own o
                        WHERE o.rule = a.rule AND o.object_type = a.object_type AND o.pk = a.pk AND NOT o.cleared_then)
       AND NOT EXISTS (
         SELECT 1 FROM ch n
          WHERE n.depth < c.depth
            AND (EXISTS (SELECT 1 FROM rm_objects r
                          WHERE r.world_id = n.world_id AND r.type = a.object_type AND r.pk = a.pk
                            AND (n.point IS NULL OR r.seq <= n.point))
              OR EXISTS (SELECT 1 FROM rm_objects_history h
                          WHERE h.world_id = n.world_id AND h.type = a.object_type AND h.pk = a.pk
                            AND h.seq <= n.point)))
  ) x
  WHERE ($3::text IS NULL OR rule = $3) AND ($4::text IS NULL OR "alertType" = $4)
    AND ($5::text IS NULL OR severity = $5) AND ($6::text IS NULL OR "objectType" = $6)
    AND ($7::text IS NULL OR pk = $7) AND ($8::uuid IS NULL OR id::uuid < $8)
    AND ($10::text IS NULL OR id = $10)
  ORDER BY id::uuid DESC LIMIT $9`;

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
            at: Type.Optional(AtState),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({
            alerts: Type.Array(AlertView),
            next: Type.Union([Type.String(), Type.Null()], { description: 'the cursor of the next page' }),
          }),
          ...readErrors,
        },
      },
    },
    async (request, reply) => {
      const { world } = request.params;
      const q = request.query;
      const waited = await app.awaitConsistency(request, world);
      const filters = {
        status: q.status,
        rule: q.rule,
        alertType: q.alertType,
        severity: q.severity,
        objectType: q.objectType,
        pk: q.pk,
      };
      const listing = JSON.stringify({ ...filters, at: q.at });
      const keyset = idKeyset(q.cursor, listing, q.limit);
      if (!(await provisioned(app.pg, world))) throw notProvisioned(world);
      const point = await app.readPoint(world, q.at);
      const forked = (await app.awaitBase(world)).kind !== 'none';
      const { db, watermark } = await app.readModelDb(request, world, waited, { primaryNow: point !== undefined });
      const { rows } = await db.query<Alert & { inherited?: boolean }>(
        forked || point
          ? ALERTS_AT
          : `SELECT ${ALERT_COLUMNS} FROM alerts
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
          ...(forked || point ? [null, point?.commit ?? null, point?.moment ?? null] : []),
        ],
      );
      const { page, next } = keyset.page(rows);
      await app.consistencyHeader(reply, world, watermark);
      return { alerts: page.map(({ inherited, ...a }) => (inherited ? inheritedView(a) : view(a))), next };
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
        querystring: Type.Object({ at: Type.Optional(AtState) }, { additionalProperties: false }),
        response: { 200: AlertView, ...readErrors },
      },
    },
    async (request, reply) => {
      const { world, id } = request.params;
      const waited = await app.awaitConsistency(request, world);
      const point = await app.readPoint(world, request.query.at);
      const { db, watermark } = await app.readModelDb(request, world, waited, { primaryNow: point !== undefined });
      let alert: (Alert & { inherited?: boolean }) | undefined;
      if (!point) {
        const { rows } = await db.query<Alert>(`SELECT ${ALERT_COLUMNS} FROM alerts WHERE world_id = $1 AND id = $2`, [
          world,
          id,
        ]);
        alert = rows[0];
      }
      // At a ref, and in a fork a base's alert it lists as inherited, by the listing's own query.
      if (!alert && (point || ((await provisioned(db, world)) && (await app.awaitBase(world)).kind !== 'none'))) {
        const found = await db.query<Alert & { inherited: boolean }>(ALERTS_AT, [
          world,
          null,
          null,
          null,
          null,
          null,
          null,
          null,
          1,
          id,
          point?.commit ?? null,
          point?.moment ?? null,
        ]);
        alert = found.rows[0];
      }
      if (!alert) throw new NotFound(`alert ${id} is not in ${world}`);
      await app.consistencyHeader(reply, world, watermark);
      const { inherited, ...a } = alert;
      return inherited ? inheritedView(a) : view(a);
    },
  );
}
