import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Conflict, NotFound, Unprocessable, WORLD_ID } from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import type pg from 'pg';
import { MAX_EXPRESSION_LENGTH } from '../cel/expressions.js';
import { listDecisionDefinitions } from '../decisions/repository.js';
import { listDerived } from '../derived/repository.js';
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
import { type ClearReason, clearAlerts } from './alerts.js';
import { ALERT_TYPE, type Rule, type RuleInput, resolveRule, SEVERITIES } from './model.js';
import { deleteRule, getRule, listRules, saveRule } from './repository.js';

const Params = Type.Object({
  world: Type.String({ pattern: WORLD_ID }),
  name: Type.String({ pattern: NAME, description: 'the rule, unique in the world' }),
});
const Severity = Type.Union(
  SEVERITIES.map((s) => Type.Literal(s)),
  { description: 'info, warning or critical' },
);
const Body = Type.Object(
  {
    objectType: Type.String({ pattern: NAME }),
    condition: Type.String({
      minLength: 1,
      maxLength: MAX_EXPRESSION_LENGTH,
      description: 'CEL over self.<property> and derived.<name>; must give a bool',
    }),
    alertType: Type.String({ pattern: ALERT_TYPE }),
    severity: Severity,
    description: Type.Optional(Type.String({ maxLength: 2000 })),
  },
  { additionalProperties: false },
);
const Recompute = Type.Object({
  pending: Type.Boolean(),
  processed: Type.Integer(),
  requestedAt: Type.String(),
  finishedAt: Type.Union([Type.String(), Type.Null()]),
});
const View = Type.Object({
  name: Type.String(),
  objectType: Type.String(),
  condition: Type.String(),
  alertType: Type.String(),
  severity: Severity,
  description: Type.Optional(Type.String()),
  version: Type.Integer(),
  state: Type.Union([Type.Literal('valid'), Type.Literal('invalid')]),
  errors: Type.Array(Type.Object({ path: Type.String(), message: Type.String() })),
  schemaVersion: Type.Integer(),
  createdAt: Type.String(),
  updatedAt: Type.String(),
  evaluation: Type.Optional(Type.Union([Recompute, Type.Null()])),
});

function view(r: Rule, evaluation?: RecomputeProgress | null) {
  return {
    name: r.name,
    objectType: r.objectType,
    condition: r.condition,
    alertType: r.alertType,
    severity: r.severity,
    ...(r.description === undefined ? {} : { description: r.description }),
    version: r.version,
    state: r.state,
    errors: r.errors,
    schemaVersion: r.schemaVersion,
    createdAt: r.createdAt,
    updatedAt: r.updatedAt,
    ...(evaluation === undefined ? {} : { evaluation }),
  };
}

/** Clears every open alert of a rule (it was deleted, or changed what its alerts say). */
async function clearRuleAlerts(tx: pg.PoolClient, world: string, rule: string, reason: ClearReason, prefix: string) {
  const { rows } = await tx.query<{ id: string }>(
    `SELECT id::text FROM alerts WHERE world_id = $1 AND rule = $2 AND status = 'OPEN'`,
    [world, rule],
  );
  await clearAlerts(
    tx,
    rows.map((r) => ({ id: r.id, objectVersion: null })),
    reason,
    prefix,
  );
}

/** `PUT|GET|DELETE /v1/worlds/{world}/rules/{name}` and the list. */
export async function ruleRoutes(fastify: FastifyInstance, engine: Engine) {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  app.put(
    '/v1/worlds/:world/rules/:name',
    {
      preHandler: app.authorize({ role: 'editor' }),
      schema: {
        tags: ['rules'],
        summary: 'Define or change a rule',
        description:
          'Evaluated whenever an object’s properties or derived values that the condition reads change; edge-triggered: alert.raised when it becomes true, alert.cleared when it becomes false, at most one open alert per object. A new or changed rule is evaluated for every existing object (see evaluation). Changing the object type, alert type or severity clears the rule’s open alerts first. ETag: the rule version.',
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
      const input: RuleInput = { ...request.body };
      const result = await inWorld(app.pg, world, async (tx) => {
        const rules = await listRules(tx, world);
        const existing = rules.find((r) => r.name === name);
        checkIfMatch(expected, existing?.version, `rule ${name}`);
        if (
          existing?.state === 'valid' &&
          existing.objectType === input.objectType &&
          existing.condition === input.condition &&
          existing.alertType === input.alertType &&
          existing.severity === input.severity &&
          (existing.description ?? null) === (input.description ?? null)
        ) {
          return { status: 200, rule: existing };
        }
        const { version: schemaVersion, document } = await app.schemaReplica.current(tx, world);
        const derived = await listDerived(tx, world);
        const states = new Map(derived.map((d) => [d.name, { objectType: d.objectType, state: d.state }]));
        const version = (existing?.version ?? 0) + 1;
        const checked = resolveRule(name, input, version, document, states);
        if (!checked.resolved) throw new Unprocessable(`rule ${name} cannot be defined`, checked.errors);
        const decisions = await listDecisionDefinitions(tx, world);
        const candidate: Rule = {
          ...input,
          worldId: world,
          name,
          version,
          state: 'valid',
          errors: [],
          schemaVersion,
          createdAt: '',
          updatedAt: '',
        };
        const broken = invalidatedBy(
          document,
          { derived, rules, decisions },
          { derived, rules: [...rules.filter((r) => r.name !== name), candidate], decisions },
        );
        if (broken.length > 0) {
          throw new Conflict(`changing rule ${name} would break what reads it: ${broken.join('; ')}`, {
            invalidates: broken,
          });
        }
        if (
          existing &&
          (existing.objectType !== input.objectType ||
            existing.alertType !== input.alertType ||
            existing.severity !== input.severity)
        ) {
          await clearRuleAlerts(tx, world, name, 'rule changed', app.topicPrefix);
        }
        const rule = await saveRule(tx, {
          ...input,
          worldId: world,
          name,
          version,
          state: 'valid',
          errors: [],
          schemaVersion,
        });
        await requestRecompute(tx, {
          worldId: world,
          kind: 'rule',
          name,
          definitionVersion: version,
          objectType: input.objectType,
          dueInMs: 0,
        });
        await bumpRevision(tx, world);
        return { status: existing ? 200 : 201, rule };
      });
      engine.worker.wake();
      await app.consistencyHeader(reply, world);
      reply.code(result.status).header('etag', `"${result.rule.version}"`);
      if (result.status === 201) reply.header('location', `/v1/worlds/${world}/rules/${name}`);
      return view(result.rule, await recomputeOf(app.pg, world, 'rule', name));
    },
  );

  app.get(
    '/v1/worlds/:world/rules/:name',
    {
      preHandler: app.authorize({ role: 'viewer' }),
      schema: {
        tags: ['rules'],
        summary: 'Read a rule and the progress of its evaluation over existing objects',
        params: Params,
        headers: ReadHeaders,
        response: { 200: View, ...errors },
      },
    },
    async (request, reply) => {
      const { world, name } = request.params;
      const watermark = await app.awaitConsistency(request, world);
      const rule = await getRule(app.pg, world, name);
      if (!rule) {
        if (!(await provisioned(app.pg, world))) throw notProvisioned(world);
        throw new NotFound(`rule ${name} is not defined in ${world}`);
      }
      reply.header('etag', `"${rule.version}"`);
      await app.consistencyHeader(reply, world, watermark);
      return view(rule, await recomputeOf(app.pg, world, 'rule', name));
    },
  );

  app.get(
    '/v1/worlds/:world/rules',
    {
      preHandler: app.authorize({ role: 'viewer' }),
      schema: {
        tags: ['rules'],
        summary: 'List the rules of a world',
        params: Type.Object({ world: Type.String({ pattern: WORLD_ID }) }),
        headers: ReadHeaders,
        querystring: Type.Object(
          {
            objectType: Type.Optional(Type.String({ pattern: NAME })),
            alertType: Type.Optional(Type.String({ pattern: ALERT_TYPE })),
          },
          { additionalProperties: false },
        ),
        response: { 200: Type.Object({ rules: Type.Array(View) }), ...errors },
      },
    },
    async (request, reply) => {
      const { world } = request.params;
      const watermark = await app.awaitConsistency(request, world);
      if (!(await provisioned(app.pg, world))) throw notProvisioned(world);
      const { objectType, alertType } = request.query;
      const rules = await listRules(app.pg, world);
      await app.consistencyHeader(reply, world, watermark);
      return {
        rules: rules
          .filter(
            (r) =>
              (objectType === undefined || r.objectType === objectType) &&
              (alertType === undefined || r.alertType === alertType),
          )
          .map((r) => view(r)),
      };
    },
  );

  app.delete(
    '/v1/worlds/:world/rules/:name',
    {
      preHandler: app.authorize({ role: 'editor' }),
      schema: {
        tags: ['rules'],
        summary: 'Delete a rule; its open alerts are cleared',
        description: 'A 409 names the decision definitions that decide on it.',
        params: Params,
        headers: WriteHeaders,
        response: { 204: Type.Null(), ...errors },
      },
    },
    async (request, reply) => {
      const { world, name } = request.params;
      const expected = ifMatch(request);
      await inWorld(app.pg, world, async (tx) => {
        const rules = await listRules(tx, world);
        const existing = rules.find((r) => r.name === name);
        if (!existing) throw new NotFound(`rule ${name} is not defined in ${world}`);
        checkIfMatch(expected, existing.version, `rule ${name}`);
        const { document } = await app.schemaReplica.current(tx, world);
        const derived = await listDerived(tx, world);
        const decisions = await listDecisionDefinitions(tx, world);
        const broken = invalidatedBy(
          document,
          { derived, rules, decisions },
          { derived, rules: rules.filter((r) => r.name !== name), decisions },
        );
        if (broken.length > 0)
          throw new Conflict(`rule ${name} is used by: ${broken.join('; ')}`, { invalidates: broken });
        await clearRuleAlerts(tx, world, name, 'rule deleted', app.topicPrefix);
        await deleteRule(tx, world, name);
        await finishRecomputes(tx, world, 'rule', name);
        await bumpRevision(tx, world);
      });
      await app.consistencyHeader(reply, world);
      reply.code(204);
      return null;
    },
  );
}
