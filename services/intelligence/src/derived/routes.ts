import { canonicalJson, Unprocessable } from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { compile, MAX_EXPRESSION_LENGTH } from '../cel/expressions.js';
import { definitionResource, RecomputeView } from '../definition-routes.js';
import type { Engine } from '../engine/engine.js';
import type { RecomputeProgress } from '../engine/recompute-jobs.js';
import { definitionsOf, refuseToBreak } from '../engine/world-model.js';
import { NAME } from '../http.js';
import {
  AGGREGATE_FUNCTIONS,
  DEFAULT_MAX_STALENESS_MS,
  type DerivedDefinition,
  type DerivedInput,
  derivedInputs,
  resolveDerived,
  topologicalOrder,
} from './model.js';
import {
  deleteDerived,
  getDerived,
  getDerivedAt,
  listDerived,
  listDerivedAt,
  retireValues,
  saveDerived,
} from './repository.js';

const Aggregate = Type.Object(
  {
    function: Type.Union(
      AGGREGATE_FUNCTIONS.map((f) => Type.Literal(f)),
      { description: 'count, or sum/min/max/avg of a number' },
    ),
    linkType: Type.Optional(Type.String({ pattern: NAME, description: 'the link type to follow' })),
    series: Type.Optional(
      Type.String({ pattern: NAME, description: "or one of the object's own time series (docs/adr/0028) …" }),
    ),
    window: Type.Optional(
      Type.String({ description: '… over a window ending at its latest point: 30s, 15m, 1h, 1d, 1w' }),
    ),
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
  recompute: Type.Optional(Type.Union([RecomputeView, Type.Null()])),
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
    linkTypes: sorted(aggregates.flatMap((a) => (a.linkType ? [a.linkType] : []))),
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
  return definitionResource(fastify, engine, {
    kind: 'derived',
    path: 'derived-properties',
    what: 'derived property',
    tag: 'derived properties',
    View,
    view,
    table: { list: listDerived, get: getDerived, listAt: listDerivedAt, getAt: getDerivedAt },
    recompute: { kind: 'derived', of: (d) => ({ objectType: d.objectType, dueInMs: d.maxStalenessMs }) },
    put: {
      summary: 'Define or change a derived property',
      description:
        'Checked against the replicated schema and the world’s other definitions: an unknown reference or a cycle is a 422 naming the path (/expression, /aggregates/<alias>/…); a change that would break definitions reading this one is a 409. Values are then computed for every existing object in bounded batches (see recompute). An identical PUT changes nothing. ETag: the definition version; If-Match makes the write conditional.',
      body: Body,
      input: (body): DerivedInput => ({
        objectType: body.objectType,
        expression: body.expression,
        aggregates: body.aggregates ?? {},
        maxStalenessMs: body.maxStalenessMs ?? DEFAULT_MAX_STALENESS_MS,
        description: body.description,
      }),
      stored: (d) => ({
        objectType: d.objectType,
        expression: d.expression,
        aggregates: d.aggregates,
        maxStalenessMs: d.maxStalenessMs,
        description: d.description,
      }),
      same: sameInput,
      save: async (tx, { world, name, all, existing, input, document, next }) => {
        const others = all.filter((d) => d.name !== name);
        const states = new Map(others.map((d) => [d.name, { objectType: d.objectType, state: d.state }]));
        const checked = resolveDerived(name, input, { version: 0, validSince: '' }, document, states);
        if (!checked.resolved) throw new Unprocessable(`derived property ${name} cannot be defined`, checked.errors);
        const candidate: DerivedDefinition = { ...input, ...next, validSince: '', createdAt: '', updatedAt: '' };
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
        const { rules, decisions } = await definitionsOf(tx, world, { derived: all });
        refuseToBreak(
          document,
          { derived: all, rules, decisions },
          { derived: [...others, candidate], rules, decisions },
          (broken) => `changing derived property ${name} would break what reads it: ${broken}`,
        );
        if (existing && existing.objectType !== input.objectType) {
          await retireValues(tx, world, name);
        }
        return saveDerived(tx, { ...input, ...next, invalidateValues: true });
      },
    },
    get: { summary: 'Read a derived property’s definition and the progress of its recompute' },
    list: {
      summary: 'List the derived properties of a world',
      key: 'derivedProperties',
      query: {
        objectType: Type.Optional(Type.String({ pattern: NAME })),
        state: Type.Optional(Type.Union([Type.Literal('valid'), Type.Literal('invalid')])),
      },
      filter:
        ({ objectType, state }) =>
        (d) =>
          (objectType === undefined || d.objectType === objectType) && (state === undefined || d.state === state),
    },
    delete: {
      summary: 'Delete a derived property and its values',
      description: 'A 409 names the definitions that read it: delete or change those first.',
      remove: async (tx, { world, name, all }) => {
        const { document } = await fastify.schemaReplica.current(tx, world);
        const { rules, decisions } = await definitionsOf(tx, world, { derived: all });
        refuseToBreak(
          document,
          { derived: all, rules, decisions },
          { derived: all.filter((d) => d.name !== name), rules, decisions },
          (broken) => `derived property ${name} is read by: ${broken}`,
        );
        await deleteDerived(tx, world, name);
      },
      afterCommit: (world, name) => engine.metrics.forget(world, name),
    },
  });
}
