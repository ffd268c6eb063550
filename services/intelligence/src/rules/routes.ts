import { Unprocessable } from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import type pg from 'pg';
import { MAX_EXPRESSION_LENGTH } from '../cel/expressions.js';
import { DefinitionBookkeeping, definitionResource, RecomputeView } from '../definition-routes.js';
import type { Engine } from '../engine/engine.js';
import type { RecomputeProgress } from '../engine/recompute-jobs.js';
import { definitionsOf, refuseToBreak } from '../engine/world-model.js';
import { NAME } from '../http.js';
import { type ClearReason, clearAlerts } from './alerts.js';
import { ALERT_TYPE, type Rule, type RuleInput, resolveRule, SEVERITIES } from './model.js';
import { deleteRule, getRule, getRuleAt, listRules, listRulesAt, saveRule } from './repository.js';

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
const View = Type.Object({
  name: Type.String(),
  objectType: Type.String(),
  condition: Type.String(),
  alertType: Type.String(),
  severity: Severity,
  description: Type.Optional(Type.String()),
  ...DefinitionBookkeeping,
  evaluation: Type.Optional(Type.Union([RecomputeView, Type.Null()])),
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
    world,
    rows.map((r) => ({ id: r.id, objectVersion: null })),
    reason,
    prefix,
  );
}

/** `PUT|GET|DELETE /v1/worlds/{world}/rules/{name}` and the list. */
export async function ruleRoutes(fastify: FastifyInstance, engine: Engine) {
  return definitionResource(fastify, engine, {
    kind: 'rule',
    path: 'rules',
    what: 'rule',
    tag: 'rules',
    View,
    view,
    table: { list: listRules, get: getRule, listAt: listRulesAt, getAt: getRuleAt },
    recompute: { kind: 'rule', of: (r) => ({ objectType: r.objectType, dueInMs: 0 }) },
    put: {
      summary: 'Define or change a rule',
      description:
        'Evaluated whenever an object’s properties or derived values that the condition reads change; edge-triggered: alert.raised when it becomes true, alert.cleared when it becomes false, at most one open alert per object. A new or changed rule is evaluated for every existing object (see evaluation). Changing the object type, alert type or severity clears the rule’s open alerts first. ETag: the rule version.',
      body: Body,
      input: (body): RuleInput => ({ ...body }),
      stored: (r) => ({
        objectType: r.objectType,
        condition: r.condition,
        alertType: r.alertType,
        severity: r.severity,
        description: r.description,
      }),
      same: (existing, input) =>
        existing.objectType === input.objectType &&
        existing.condition === input.condition &&
        existing.alertType === input.alertType &&
        existing.severity === input.severity &&
        (existing.description ?? null) === (input.description ?? null),
      save: async (tx, { world, name, all: rules, existing, input, version, document, next }) => {
        const { derived, decisions } = await definitionsOf(tx, world, { rules });
        const states = new Map(derived.map((d) => [d.name, { objectType: d.objectType, state: d.state }]));
        const checked = resolveRule(name, input, version, document, states);
        if (!checked.resolved) throw new Unprocessable(`rule ${name} cannot be defined`, checked.errors);
        const candidate: Rule = { ...input, ...next, createdAt: '', updatedAt: '' };
        refuseToBreak(
          document,
          { derived, rules, decisions },
          { derived, rules: [...rules.filter((r) => r.name !== name), candidate], decisions },
          (broken) => `changing rule ${name} would break what reads it: ${broken}`,
        );
        if (
          existing &&
          (existing.objectType !== input.objectType ||
            existing.alertType !== input.alertType ||
            existing.severity !== input.severity)
        ) {
          await clearRuleAlerts(tx, world, name, 'rule changed', fastify.topicPrefix);
        }
        return saveRule(tx, { ...input, ...next });
      },
    },
    get: { summary: 'Read a rule and the progress of its evaluation over existing objects' },
    list: {
      summary: 'List the rules of a world',
      key: 'rules',
      query: {
        objectType: Type.Optional(Type.String({ pattern: NAME })),
        alertType: Type.Optional(Type.String({ pattern: ALERT_TYPE })),
      },
      filter:
        ({ objectType, alertType }) =>
        (r) =>
          (objectType === undefined || r.objectType === objectType) &&
          (alertType === undefined || r.alertType === alertType),
    },
    delete: {
      summary: 'Delete a rule; its open alerts are cleared',
      description: 'A 409 names the decision definitions that decide on it.',
      remove: async (tx, { world, name, all: rules }) => {
        const { document } = await fastify.schemaReplica.current(tx, world);
        const { derived, decisions } = await definitionsOf(tx, world, { rules });
        refuseToBreak(
          document,
          { derived, rules, decisions },
          { derived, rules: rules.filter((r) => r.name !== name), decisions },
          (broken) => `rule ${name} is used by: ${broken}`,
        );
        await clearRuleAlerts(tx, world, name, 'rule deleted', fastify.topicPrefix);
        await deleteRule(tx, world, name);
      },
    },
  });
}
