import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  AUDIT_RESULTS,
  BadRequest,
  decodeCursor,
  encodeCursor,
  Forbidden,
  PRODUCERS,
  principalOf,
  problemResponses,
  WORLD_ID,
} from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { listAuditRecords, storeAuditRecords } from './repository.js';

const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(schema: T) => Type.Union([schema, Type.Null()]);
const ACTION = '^[a-z][a-z0-9-]*(\\.[a-z][a-z0-9-]*)+$';

const AuditRecord = Type.Object(
  {
    eventId: Type.String({ description: 'the audit.recorded event' }),
    recordedAt: Type.String({ format: 'date-time', description: 'when the service committed the change' }),
    service: Type.Union(
      PRODUCERS.map((p) => Type.Literal(p)),
      { description: 'the service that made the change' },
    ),
    world: Nullable(Type.String({ description: 'null: an action of no world (users, tokens, the outbox)' })),
    actor: Type.String({ description: 'the user who acted' }),
    tokenId: Nullable(Type.String({ description: "the access token's id (jti) the request carried" })),
    action: Type.String({ description: 'what was done, e.g. object.put, world.create, identity.token.exchange' }),
    target: Nullable(Type.String({ description: 'what was acted on, e.g. Order/o-1' })),
    requestId: Type.String({ description: 'the x-request-id of the request' }),
    result: Type.Union(AUDIT_RESULTS.map((r) => Type.Literal(r))),
    beforeVersion: Nullable(Type.Integer()),
    afterVersion: Nullable(Type.Integer()),
    detail: Type.Record(Type.String(), Type.Unknown()),
  },
  { description: 'one audited request' },
);

/**
 * The audit trail (docs/adr/0084): the control-audit consumer keeps every audit.recorded event of
 * onto.audit in audit_records; GET /v1/audit reads it, for administrators (every world) and the
 * owners of the world they name.
 */
export default fp(
  async (fastify: FastifyInstance) => {
    fastify.addConsumer({
      name: 'control-audit',
      topics: ['onto.audit'],
      apply: async (_tx, events) => storeAuditRecords(events),
    });
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
    app.get(
      '/v1/audit',
      {
        preHandler: app.authorize({ authenticated: true }),
        schema: {
          tags: ['audit'],
          summary: 'The audit trail: every committed change of the three services, newest first',
          description:
            'An administrator may read every world and the actions of no world; anyone else must name a `world` they own (403 otherwise, and without `world`). Filters combine: `world`, `actor` (a user id), `action` (e.g. object.put), `requestId`, `from` (inclusive) and `to` (exclusive) instants. Records arrive from each service through Kafka: a change is listed within moments of its commit. Paged by `pageSize` (1 to 1000, default 100) and `pageToken` (the `nextPageToken` of the previous page, null on the last).',
          querystring: Type.Object(
            {
              world: Type.Optional(Type.String({ pattern: WORLD_ID })),
              actor: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
              action: Type.Optional(Type.String({ pattern: ACTION, maxLength: 200 })),
              requestId: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
              from: Type.Optional(
                Type.String({ format: 'date-time', description: 'records at or after this instant' }),
              ),
              to: Type.Optional(Type.String({ format: 'date-time', description: 'records before this instant' })),
              pageSize: Type.Integer({ minimum: 1, maximum: 1000, default: 100 }),
              pageToken: Type.Optional(
                Type.String({ maxLength: 200, description: 'nextPageToken of the previous page' }),
              ),
            },
            { additionalProperties: false },
          ),
          response: {
            200: Type.Object({
              records: Type.Array(AuditRecord),
              nextPageToken: Nullable(Type.String({ description: 'the next page; null on the last' })),
            }),
            ...problemResponses(400, 401, 403, 503),
          },
        },
      },
      async (request) => {
        const { world, actor, action, requestId, from, to, pageSize, pageToken } = request.query;
        const principal = principalOf(request);
        if (!principal.admin) {
          if (world === undefined)
            throw new Forbidden('only an administrator reads the audit of every world: name a world you own');
          if ((Object.hasOwn(principal.roles, world) ? principal.roles[world] : undefined) !== 'owner')
            throw new Forbidden(`only an owner of ${world} or an administrator reads its audit`);
        }
        if (from !== undefined && to !== undefined && Date.parse(from) >= Date.parse(to)) {
          throw new BadRequest('`to` must be after `from`', [
            { path: 'querystring/to', message: 'must be after from' },
          ]);
        }
        const after = pageToken === undefined ? undefined : pagePosition(pageToken);
        const rows = await listAuditRecords(app.pg, {
          ...(world === undefined ? {} : { world }),
          ...(actor === undefined ? {} : { actor }),
          ...(action === undefined ? {} : { action }),
          ...(requestId === undefined ? {} : { requestId }),
          ...(from === undefined ? {} : { from }),
          ...(to === undefined ? {} : { to }),
          ...(after === undefined ? {} : { after }),
          limit: pageSize + 1,
        });
        const records = rows.slice(0, pageSize);
        const last = records.at(-1);
        return {
          records,
          nextPageToken: rows.length > pageSize && last ? encodeCursor({ a: last.recordedAt, e: last.eventId }) : null,
        };
      },
    );
  },
  { name: 'onto-control-audit', dependencies: ['onto-consumers', 'onto-auth'] },
);

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** Where a page token says the page starts; a token this route did not issue is a 400 naming it. */
function pagePosition(token: string): { at: string; id: string } {
  try {
    return decodeCursor(token, (c) =>
      typeof c.a === 'string' && !Number.isNaN(Date.parse(c.a)) && typeof c.e === 'string' && UUID.test(c.e)
        ? { at: c.a, id: c.e }
        : undefined,
    ) as { at: string; id: string };
  } catch {
    throw new BadRequest('the page token is not one this listing issued', [
      { path: 'querystring/pageToken', message: 'must be the nextPageToken of a previous page' },
    ]);
  }
}
