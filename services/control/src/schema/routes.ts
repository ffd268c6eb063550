import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  actorOf,
  BODY_LIMITS,
  documentedJsonBody,
  Headers,
  ifMatch,
  inTransaction,
  NotFound,
  PreconditionFailed,
  problemResponses,
  recordAudit,
  Unprocessable,
  WORLD_ID,
  withOcc,
} from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { lockWorld, lockWritableWorld } from '../worlds/repository.js';
import { ActionTypeBody, LinkTypeBody, ObjectTypeBody } from './bodies.js';
import { checkActionType, checkLinkType, checkObjectType, NAME, type SchemaDocument, usesOf } from './model.js';
import { currentSchema, history, schemaAt, writeVersion } from './repository.js';

/** What a schema write's If-Match may name: the version it is based on, 0 before the first. */
const SCHEMA_IF_MATCH = { what: 'a schema version', any: false, min: 0, maxDigits: 9 } as const;

const WorldParams = Type.Object({ world: Type.String({ pattern: WORLD_ID }) });
const TypeParams = Type.Object({
  world: Type.String({ pattern: WORLD_ID }),
  apiName: Type.String({ pattern: NAME.source }),
});
const Schema = Type.Object({
  version: Type.Integer(),
  objectTypes: Type.Record(Type.String(), Type.Unknown()),
  linkTypes: Type.Record(Type.String(), Type.Unknown()),
  actionTypes: Type.Record(Type.String(), Type.Unknown()),
});
const Written = Type.Object({
  version: Type.Integer(),
  changed: Type.Boolean(),
  breaking: Type.Boolean(),
  changes: Type.Array(
    Type.Object({
      path: Type.String(),
      change: Type.String(),
      breaking: Type.Boolean(),
      reason: Type.Optional(Type.String()),
    }),
  ),
});
const errors = problemResponses(400, 401, 403, 404, 409, 412, 422, 503);

type Kind = 'objectTypes' | 'linkTypes' | 'actionTypes';
const BODIES = { objectTypes: ObjectTypeBody, linkTypes: LinkTypeBody, actionTypes: ActionTypeBody };

const KINDS: { path: string; kind: Kind; label: string }[] = [
  { path: 'object-types', kind: 'objectTypes', label: 'object type' },
  { path: 'link-types', kind: 'linkTypes', label: 'link type' },
  { path: 'action-types', kind: 'actionTypes', label: 'action type' },
];

/**
 * The ontology schema of each world: strongly consistent. Every change is a new version written
 * in a SERIALIZABLE transaction (retried on serialization failures), conditional on If-Match,
 * with `schema.updated` enqueued in the same transaction.
 */
export default fp(
  async (fastify: FastifyInstance, quotas: { maxObjectTypes: number; maxIndexedProperties: number }) => {
    const app = fastify.withTypeProvider<TypeBoxTypeProvider>();
    app.get(
      '/v1/worlds/:world/schema',
      {
        preHandler: app.authorize({ role: 'viewer' }),
        schema: {
          tags: ['schema'],
          params: WorldParams,
          querystring: Type.Object({
            version: Type.Optional(
              Type.Integer({
                minimum: 1,
                maximum: 2 ** 31 - 1,
                description: 'the schema as it was at this version (404 when the world never had it); absent: current',
              }),
            ),
          }),
          response: { 200: Schema, ...errors },
        },
      },
      async (request, reply) => {
        const { version } = request.query;
        const head = await inTransaction(app.pg, async (tx) => {
          await lockWorld(tx, request.params.world);
          return version === undefined
            ? currentSchema(tx, request.params.world)
            : schemaAt(tx, request.params.world, version);
        });
        if (!head) throw new NotFound(`world ${request.params.world} has no schema version ${version}`);
        reply.header('etag', `"${head.version}"`).header('x-consistency-token', `control=${head.version}`);
        return { version: head.version, ...head.document };
      },
    );

    app.get(
      '/v1/worlds/:world/schema/history',
      {
        preHandler: app.authorize({ role: 'viewer' }),
        schema: {
          tags: ['schema'],
          params: WorldParams,
          querystring: Type.Object({
            before: Type.Optional(Type.Integer({ minimum: 1, maximum: 2 ** 31 - 1 })),
            limit: Type.Integer({ minimum: 1, maximum: 200, default: 50 }),
          }),
          response: {
            200: Type.Object({ versions: Type.Array(Type.Unknown()), next: Type.Union([Type.Integer(), Type.Null()]) }),
            ...errors,
          },
        },
      },
      async (request) => {
        await inTransaction(app.pg, (tx) => lockWorld(tx, request.params.world));
        const versions = await history(
          app.pg,
          request.params.world,
          request.query.before ?? 2 ** 31 - 1,
          request.query.limit,
        );
        const last = versions.at(-1);
        return {
          versions,
          next: versions.length === request.query.limit && last && last.version > 1 ? last.version : null,
        };
      },
    );

    for (const { path, kind, label } of KINDS) {
      app.put(
        `/v1/worlds/:world/${path}/:apiName`,
        {
          bodyLimit: BODY_LIMITS.schema,
          preHandler: app.authorize({ role: 'owner' }),
          schema: {
            tags: ['schema'],
            summary: `Create or replace a ${label}`,
            params: TypeParams,
            headers: Type.Object({
              'if-match': Headers.ifMatch(SCHEMA_IF_MATCH, 'the schema version this change is based on'),
            }),
            body: Type.Object({}, { additionalProperties: true }),
            ...documentedJsonBody(BODIES[kind]),
            response: { 200: Written, ...errors },
          },
        },
        async (request, reply) =>
          change(request, reply, `${path}.put`, (doc) => {
            const { apiName } = request.params;
            const body = request.body as Record<string, unknown>;
            const errs =
              kind === 'objectTypes'
                ? checkObjectType(body, apiName)
                : kind === 'linkTypes'
                  ? checkLinkType(body, apiName, doc)
                  : checkActionType(body, apiName, doc);
            if (errs.length > 0) throw new Unprocessable(`the ${label} ${apiName} is invalid`, errs);
            const next: SchemaDocument = { ...doc, [kind]: { ...doc[kind], [apiName]: { ...body, apiName } } };
            if (kind === 'objectTypes') {
              checkQuotas(doc, next, quotas);
              // Links and actions that use this type must still make sense after the change.
              const broken = revalidateDependents(next);
              if (broken.length > 0) throw new Unprocessable(`the change to ${apiName} breaks what uses it`, broken);
            }
            return next;
          }),
      );

      app.delete(
        `/v1/worlds/:world/${path}/:apiName`,
        {
          preHandler: app.authorize({ role: 'owner' }),
          schema: {
            tags: ['schema'],
            summary: `Delete a ${label}`,
            params: TypeParams,
            headers: Type.Object({
              'if-match': Headers.ifMatch(SCHEMA_IF_MATCH, 'the schema version this change is based on'),
            }),
            response: { 200: Written, ...errors },
          },
        },
        async (request, reply) =>
          change(request, reply, `${path}.delete`, (doc) => {
            const { apiName } = request.params;
            if (!Object.hasOwn(doc[kind], apiName)) {
              throw new NotFound(`${label} ${apiName} does not exist in ${request.params.world}`);
            }
            if (kind !== 'actionTypes') {
              const uses = usesOf(doc, kind === 'objectTypes' ? 'objectType' : 'linkType', apiName);
              if (uses.length > 0) throw new Unprocessable(`${label} ${apiName} is still in use`, uses);
            }
            const rest = { ...doc[kind] };
            if (Object.hasOwn(rest, apiName)) delete rest[apiName];
            return { ...doc, [kind]: rest };
          }),
      );
    }

    async function change(
      request: FastifyRequest,
      reply: FastifyReply,
      action: string,
      mutate: (doc: SchemaDocument) => SchemaDocument,
    ) {
      const expected = ifMatch(request, SCHEMA_IF_MATCH);
      const { world, apiName } = request.params as { world: string; apiName: string };
      const result = await withOcc(() =>
        inTransaction(
          app.pg,
          async (tx) => {
            await lockWritableWorld(tx, world);
            const before = await currentSchema(tx, world);
            if (expected !== undefined && expected !== before.version) {
              throw new PreconditionFailed(`the schema of ${world} is at version ${before.version}, not ${expected}`, {
                currentVersion: before.version,
              });
            }
            const after = mutate(before.document);
            const written = await writeVersion(tx, {
              worldId: world,
              author: actorOf(request),
              requestId: request.id,
              before,
              after,
              topicPrefix: app.topicPrefix,
            });
            await recordAudit(tx, request, {
              action: `schema.${action}`,
              result: !written ? 'unchanged' : action.endsWith('.delete') ? 'deleted' : 'updated',
              worldId: world,
              subject: apiName,
              beforeVersion: before.version,
              afterVersion: written?.version ?? before.version,
            });
            if (!written) return { version: before.version, changed: false, breaking: false, changes: [] };
            return {
              version: written.version,
              changed: true,
              breaking: written.diff.breaking,
              changes: written.diff.changes,
            };
          },
          'SERIALIZABLE',
        ),
      );
      reply.header('etag', `"${result.version}"`).header('x-consistency-token', `control=${result.version}`);
      return result;
    }
  },
  { name: 'onto-control-schema', dependencies: ['onto-auth'] },
);

const indexedIn = (doc: SchemaDocument) =>
  Object.values(doc.objectTypes).reduce(
    (n, t) => n + Object.values(t.properties).filter((p) => p.indexed === true).length,
    0,
  );

/**
 * A change that adds object types or indexed properties stays within the configured quotas (422
 * otherwise); one that does not add any passes, so lowering a quota does not freeze a world.
 */
function checkQuotas(
  before: SchemaDocument,
  doc: SchemaDocument,
  quotas: { maxObjectTypes: number; maxIndexedProperties: number },
) {
  const types = Object.values(doc.objectTypes);
  if (types.length > quotas.maxObjectTypes && types.length > Object.keys(before.objectTypes).length) {
    throw new Unprocessable(`a world may have at most ${quotas.maxObjectTypes} object types`, [
      {
        path: '/',
        message: `would be object type ${types.length} of at most ${quotas.maxObjectTypes} (MAX_OBJECT_TYPES_PER_WORLD)`,
      },
    ]);
  }
  const indexed = indexedIn(doc);
  if (indexed > quotas.maxIndexedProperties && indexed > indexedIn(before)) {
    throw new Unprocessable(`a world may have at most ${quotas.maxIndexedProperties} indexed properties`, [
      {
        path: '/properties',
        message: `would make ${indexed} indexed properties in the world, at most ${quotas.maxIndexedProperties} (MAX_INDEXED_PROPERTIES_PER_WORLD)`,
      },
    ]);
  }
}

/** Every link and action type checked again against a changed document. */
function revalidateDependents(doc: SchemaDocument) {
  const errs = [];
  for (const link of Object.values(doc.linkTypes)) {
    errs.push(
      ...checkLinkType(link, link.apiName, doc).map((e) => ({ ...e, path: `/linkTypes/${link.apiName}${e.path}` })),
    );
  }
  for (const action of Object.values(doc.actionTypes)) {
    errs.push(
      ...checkActionType(action, action.apiName, doc).map((e) => ({
        ...e,
        path: `/actionTypes/${action.apiName}${e.path}`,
      })),
    );
  }
  return errs;
}
