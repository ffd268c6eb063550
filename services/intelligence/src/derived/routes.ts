import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Conflict, canonicalJson, NotFound, Unprocessable, WORLD_ID } from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { compile, MAX_EXPRESSION_LENGTH } from '../cel/expressions.js';
import { listDecisionDefinitions } from '../decisions/repository.js';
import type { Engine } from '../engine/engine.js';
import { bumpRevision } from '../engine/locks.js';
import { finishRecomputes, type RecomputeProgress, recomputeOf, requestRecompute } from '../engine/recompute-jobs.js';
import { invalidatedBy } from '../engine/world-model.js';
import {
  checkIfMatch,
  errors,
  ifMatch,
  inWorld,
  NAME,
  notProvisioned,
  provisioned,
  ReadHeaders,
  WriteHeaders,
} from '../http.js';
import { listRules } from '../rules/repository.js';
import {
  AGGREGATE_FUNCTIONS,
  DEFAULT_MAX_STALENESS_MS,
  type DerivedDefinition,
  type DerivedInput,
  derivedInputs,
  resolveDerived,
  topologicalOrder,
} from './model.js';
import { deleteDerived, getDerived, listDerived, saveDerived } from './repository.js';

const Params = Type.Object({
  world: Type.String({ pattern: WORLD_ID }),
  name: Type.String({ pattern: NAME, description: 'the derived property, unique in the world' }),
});
const Aggregate = Type.Object(
  {
    function: Type.Union(
      AGGREGATE_FUNCTIONS.map((f) => Type.Literal(f)),
      { description: 'count, or sum/min/max/avg of a number' },
    ),
    linkType: Type.String({ pattern: NAME, description: 'the link type to follow' }),
    direction: Type.Optional(
      Type.Union([Type.Literal('out'), Type.Literal('in')], {
        description:
          'out: the object is the link type’s from end; in: its to end. Needed only when the link type links a type to itself',
      }),
    ),
    property: Type.Optional(Type.String({ pattern: NAME, description: "the linked objects' number property" })),
    derived: Type.Optional(Type.String({ pattern: NAME, description: "or the linked objects' derived property" })),
  },
  { additionalProperties: false },
);
const Body = Type.Object(
  {
    objectType: Type.String({ pattern: NAME }),
    expression: Type.String({
      minLength: 1,
      maxLength: MAX_EXPRESSION_LENGTH,
      description: 'CEL over self.<property>, derived.<name> (same object) and agg.<alias>',
    }),
    aggregates: Type.Optional(
      Type.Record(Type.String({ pattern: NAME }), Aggregate, {
        additionalProperties: false,
        maxProperties: 32,
        description: 'aliases read as agg.<alias>',
      }),
    ),
    maxStalenessMs: Type.Optional(
      Type.Integer({ minimum: 1, maximum: 86_400_000, description: `default ${DEFAULT_MAX_STALENESS_MS}` }),
    ),
    description: Type.Optional(Type.String({ maxLength: 2000 })),
  },
  { additionalProperties: false },
);
const FieldErrors = Type.Array(Type.Object({ path: Type.String(), message: Type.String() }));
const Recompute = Type.Object({
  pending: Type.Boolean(),
  processed: Type.Integer(),
  requestedAt: Type.String(),
  finishedAt: Type.Union([Type.String(), Type.Null()]),
});
const View = Type.Object({
  name: Type.String(),
  objectType: Type.String(),
  expression: Type.String(),
  aggregates: Type.Record(Type.String(), Aggregate),
  maxStalenessMs: Type.Integer(),
  description: Type.Optional(Type.String()),
  version: Type.Integer(),
  state: Type.Union([Type.Literal('valid'), Type.Literal('invalid')]),
  errors: FieldErrors,
  dependsOn: Type.Object({
    properties: Type.Array(Type.String()),
    derived: Type.Array(Type.String()),
    linkTypes: Type.Array(Type.String()),
  }),
  schemaVersion: Type.Integer(),
  validSince: Type.String(),
  createdAt: Type.String(),
  updatedAt: Type.String(),
  recompute: Type.Optional(Type.Union([Recompute, Type.Null()])),
});

const sameInput = (d: DerivedDefinition, input: DerivedInput) =>
  d.objectType === input.objectType &&
  d.expression === input.expression &&
  d.maxStalenessMs === input.maxStalenessMs &&
  (d.description ?? null) === (input.description ?? null) &&
  canonicalJson(d.aggregates) === canonicalJson(input.aggregates);

function view(d: DerivedDefinition, recompute?: RecomputeProgress | null) {
  const compiled = compile(d.expression, ['self', 'derived', 'agg']);
  const refs = compiled.ok ? compiled.refs : undefined;
  const aggregates = Object.values(d.aggregates);
  const sorted = (names: Iterable<string>) => [...new Set(names)].sort();
  const dependsOn = {
    properties: sorted(refs?.self ?? []),
    derived: sorted([...(refs?.derived ?? []), ...aggregates.flatMap((a) => (a.derived ? [a.derived] : []))]),
    linkTypes: sorted(aggregates.map((a) => a.linkType)),
  };
  return {
    name: d.name,
    objectType: d.objectType,
    expression: d.expression,
    aggregates: d.aggregates,
    maxStalenessMs: d.maxStalenessMs,
    ...(d.description === undefined ? {} : { description: d.description }),
    version: d.version,
    state: d.state,
    errors: d.errors,
    dependsOn,
    schemaVersion: d.schemaVersion,
    validSince: d.validSince,
    createdAt: d.createdAt,
    updatedAt: d.updatedAt,
    ...(recompute === undefined ? {} : { recompute }),
  };
}

/** `PUT|GET|DELETE /v1/worlds/{world}/derived-properties/{name}` and the list. */
export async function derivedRoutes(fastify: FastifyInstance, engine: Engine) {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  app.put(
    '/v1/worlds/:world/derived-properties/:name',
    {
      preHandler: app.authorize({ role: 'editor' }),
      schema: {
        tags: ['derived properties'],
        summary: 'Define or change a derived property',
        description:
          'Checked against the replicated schema and the world’s other definitions: an unknown reference or a cycle is a 422 naming the path (/expression, /aggregates/<alias>/…); a change that would break definitions reading this one is a 409. Values are then computed for every existing object in bounded batches (see recompute). An identical PUT changes nothing. ETag: the definition version; If-Match makes the write conditional.',
        params: Params,
        headers: WriteHeaders,
        body: Body,
        response: { 200: View, 201: View, ...errors },
      },
    },
    async (request, reply) => {
      const { world, name } = request.params;
      const expected = ifMatch(request);
      await app.awaitConsistency(request, world);
      const body = request.body;
      const input: DerivedInput = {
        objectType: body.objectType,
        expression: body.expression,
        aggregates: body.aggregates ?? {},
        maxStalenessMs: body.maxStalenessMs ?? DEFAULT_MAX_STALENESS_MS,
        description: body.description,
      };
      const result = await inWorld(app.pg, world, async (tx) => {
        const all = await listDerived(tx, world);
        const existing = all.find((d) => d.name === name);
        checkIfMatch(expected, existing?.version, `derived property ${name}`);
        if (existing?.state === 'valid' && sameInput(existing, input)) return { status: 200, def: existing };
        const { version: schemaVersion, document } = await app.schemaReplica.current(tx, world);
        const others = all.filter((d) => d.name !== name);
        const states = new Map(others.map((d) => [d.name, { objectType: d.objectType, state: d.state }]));
        const checked = resolveDerived(name, input, { version: 0, validSince: '' }, document, states);
        if (!checked.resolved) throw new Unprocessable(`derived property ${name} cannot be defined`, checked.errors);
        const candidate: DerivedDefinition = {
          ...input,
          worldId: world,
          name,
          version: (existing?.version ?? 0) + 1,
          state: 'valid',
          errors: [],
          schemaVersion,
          validSince: '',
          createdAt: '',
          updatedAt: '',
        };
        // Cycles: every valid definition resolved as if this one were already in place.
        const together = [...others.filter((d) => d.state === 'valid'), candidate];
        const allStates = new Map(together.map((d) => [d.name, { objectType: d.objectType, state: 'valid' as const }]));
        const resolved = together.flatMap((d) => {
          const r = resolveDerived(d.name, d, { version: d.version, validSince: '' }, document, allStates).resolved;
          return r ? [r] : [];
        });
        const ordered = topologicalOrder(resolved, derivedInputs);
        if ('cycle' in ordered && ordered.cycle.includes(name)) {
          // Told from this definition's point of view: name → … → name.
          const loop = ordered.cycle.slice(0, -1);
          const at = loop.indexOf(name);
          const cycle = [...loop.slice(at), ...loop.slice(0, at), name];
          const next = cycle[1] ?? '';
          const alias = Object.entries(input.aggregates).find(([, a]) => a.derived === next)?.[0];
          throw new Unprocessable(`derived property ${name} would make a cycle`, [
            {
              path:
                alias !== undefined && !checked.resolved.ownDerived.has(next)
                  ? `/aggregates/${alias}/derived`
                  : '/expression',
              message: `cycle ${cycle.join(' → ')}`,
            },
          ]);
        }
        const rules = await listRules(tx, world);
        const decisions = await listDecisionDefinitions(tx, world);
        const broken = invalidatedBy(
          document,
          { derived: all, rules, decisions },
          { derived: [...others, candidate], rules, decisions },
        );
        if (broken.length > 0) {
          throw new Conflict(`changing derived property ${name} would break what reads it: ${broken.join('; ')}`, {
            invalidates: broken,
          });
        }
        if (existing && existing.objectType !== input.objectType) {
          await tx.query('DELETE FROM derived_values WHERE world_id = $1 AND name = $2', [world, name]);
        }
        const def = await saveDerived(tx, {
          ...input,
          worldId: world,
          name,
          version: candidate.version,
          state: 'valid',
          errors: [],
          schemaVersion,
          invalidateValues: true,
        });
        await requestRecompute(tx, {
          worldId: world,
          kind: 'derived',
          name,
          definitionVersion: def.version,
          objectType: def.objectType,
          dueInMs: def.maxStalenessMs,
        });
        await bumpRevision(tx, world);
        return { status: existing ? 200 : 201, def };
      });
      engine.worker.wake();
      await app.consistencyHeader(reply, world);
      reply.code(result.status).header('etag', `"${result.def.version}"`);
      if (result.status === 201) reply.header('location', `/v1/worlds/${world}/derived-properties/${name}`);
      return view(result.def, await recomputeOf(app.pg, world, 'derived', name));
    },
  );

  app.get(
    '/v1/worlds/:world/derived-properties/:name',
    {
      preHandler: app.authorize({ role: 'viewer' }),
      schema: {
        tags: ['derived properties'],
        summary: 'Read a derived property’s definition and the progress of its recompute',
        params: Params,
        headers: ReadHeaders,
        response: { 200: View, ...errors },
      },
    },
    async (request, reply) => {
      const { world, name } = request.params;
      const watermark = await app.awaitConsistency(request, world);
      const def = await getDerived(app.pg, world, name);
      if (!def) {
        if (!(await provisioned(app.pg, world))) throw notProvisioned(world);
        throw new NotFound(`derived property ${name} is not defined in ${world}`);
      }
      reply.header('etag', `"${def.version}"`);
      await app.consistencyHeader(reply, world, watermark);
      return view(def, await recomputeOf(app.pg, world, 'derived', name));
    },
  );

  app.get(
    '/v1/worlds/:world/derived-properties',
    {
      preHandler: app.authorize({ role: 'viewer' }),
      schema: {
        tags: ['derived properties'],
        summary: 'List the derived properties of a world',
        params: Type.Object({ world: Type.String({ pattern: WORLD_ID }) }),
        headers: ReadHeaders,
        querystring: Type.Object(
          {
            objectType: Type.Optional(Type.String({ pattern: NAME })),
            state: Type.Optional(Type.Union([Type.Literal('valid'), Type.Literal('invalid')])),
          },
          { additionalProperties: false },
        ),
        response: { 200: Type.Object({ derivedProperties: Type.Array(View) }), ...errors },
      },
    },
    async (request, reply) => {
      const { world } = request.params;
      const watermark = await app.awaitConsistency(request, world);
      if (!(await provisioned(app.pg, world))) throw notProvisioned(world);
      const { objectType, state } = request.query;
      const all = await listDerived(app.pg, world);
      await app.consistencyHeader(reply, world, watermark);
      return {
        derivedProperties: all
          .filter(
            (d) =>
              (objectType === undefined || d.objectType === objectType) && (state === undefined || d.state === state),
          )
          .map((d) => view(d)),
      };
    },
  );

  app.delete(
    '/v1/worlds/:world/derived-properties/:name',
    {
      preHandler: app.authorize({ role: 'editor' }),
      schema: {
        tags: ['derived properties'],
        summary: 'Delete a derived property and its values',
        description: 'A 409 names the definitions that read it: delete or change those first.',
        params: Params,
        headers: WriteHeaders,
        response: { 204: Type.Null(), ...errors },
      },
    },
    async (request, reply) => {
      const { world, name } = request.params;
      const expected = ifMatch(request);
      await inWorld(app.pg, world, async (tx) => {
        const all = await listDerived(tx, world);
        const existing = all.find((d) => d.name === name);
        if (!existing) throw new NotFound(`derived property ${name} is not defined in ${world}`);
        checkIfMatch(expected, existing.version, `derived property ${name}`);
        const { document } = await app.schemaReplica.current(tx, world);
        const rules = await listRules(tx, world);
        const decisions = await listDecisionDefinitions(tx, world);
        const broken = invalidatedBy(
          document,
          { derived: all, rules, decisions },
          { derived: all.filter((d) => d.name !== name), rules, decisions },
        );
        if (broken.length > 0) {
          throw new Conflict(`derived property ${name} is read by: ${broken.join('; ')}`, { invalidates: broken });
        }
        await deleteDerived(tx, world, name);
        await finishRecomputes(tx, world, 'derived', name);
        await bumpRevision(tx, world);
      });
      engine.metrics.forget(world, name);
      await app.consistencyHeader(reply, world);
      reply.code(204);
      return null;
    },
  );
}
