import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  actorOf,
  BODY_LIMITS,
  Conflict,
  inTransaction,
  NotFound,
  recordAudit,
  Unprocessable,
  WORLD_ID,
} from '@onto/shared';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { MAX_EXPRESSION_LENGTH } from '../cel/expressions.js';
import { DefinitionBookkeeping, definitionResource } from '../definition-routes.js';
import type { Engine } from '../engine/engine.js';
import { definitionsOf } from '../engine/world-model.js';
import {
  AtState,
  errors,
  idKeyset,
  NAME,
  notProvisioned,
  provisioned,
  ReadHeaders,
  readErrors,
  UUID,
} from '../http.js';
import { ALERT_TYPE } from '../rules/model.js';
import { DECISION_COLUMNS, type Decision, decideManually } from './make.js';
import { APPROVALS, DECISION_STATUSES, type DecisionDefinition, type DecisionInput, resolveDecision } from './model.js';
import {
  deleteDecisionDefinition,
  getDecisionDefinition,
  getDecisionDefinitionAt,
  listDecisionDefinitions,
  listDecisionDefinitionsAt,
  saveDecisionDefinition,
} from './repository.js';

const WorldParams = Type.Object({ world: Type.String({ pattern: WORLD_ID }) });

/**
 * The world's decisions at a point (`?at=`: parameters `c`, a data commit, and `m`, a moment, docs/adr/0069): each
 * as its newest version by then (decisions_history, migration 021), of an alert raised by the
 * commit; one made later is not there. A fork's decisions are its own (docs/adr/0033).
 */
const decisionsAt = (c: string, m: string) => `(SELECT DISTINCT ON (v.id) v.* FROM (
     SELECT * FROM decisions WHERE world_id = $1 AND seq <= ${m}
     UNION ALL
     SELECT * FROM decisions_history WHERE world_id = $1 AND seq <= ${m}
   ) v
   WHERE EXISTS (SELECT 1 FROM alerts a WHERE a.id = v.alert_id AND a.raised_data_seq <= ${c})
   ORDER BY v.id, v.seq DESC)`;
const Approval = Type.Union(APPROVALS.map((a) => Type.Literal(a)));
const Body = Type.Object(
  {
    rule: Type.Optional(Type.String({ pattern: NAME, description: 'decide on the alerts of this rule …' })),
    alertType: Type.Optional(Type.String({ pattern: ALERT_TYPE, description: '… or on every alert of this type' })),
    actionType: Type.String({ pattern: NAME, description: 'an action type of the replicated schema' }),
    parameters: Type.Record(
      Type.String({ pattern: NAME }),
      Type.String({ minLength: 1, maxLength: MAX_EXPRESSION_LENGTH }),
      {
        additionalProperties: false,
        maxProperties: 64,
        description: "CEL per action parameter, over the alert's object (self, derived) and alert",
      },
    ),
    approval: Approval,
    description: Type.Optional(Type.String({ maxLength: 2000 })),
  },
  { additionalProperties: false },
);
const DefinitionView = Type.Object({
  name: Type.String(),
  rule: Type.Optional(Type.String()),
  alertType: Type.Optional(Type.String()),
  actionType: Type.String(),
  parameters: Type.Record(Type.String(), Type.String()),
  approval: Approval,
  description: Type.Optional(Type.String()),
  ...DefinitionBookkeeping,
});
const DecisionView = Type.Object({
  id: Type.String(),
  definition: Type.String(),
  definitionVersion: Type.Integer(),
  alertId: Type.String(),
  rule: Type.String(),
  alertType: Type.String(),
  objectType: Type.String(),
  pk: Type.String(),
  actionType: Type.String(),
  parameters: Type.Union([Type.Record(Type.String(), Type.Unknown()), Type.Null()]),
  approval: Approval,
  status: Type.Union(DECISION_STATUSES.map((s) => Type.Literal(s))),
  error: Type.Union([Type.Record(Type.String(), Type.Unknown()), Type.Null()]),
  actionId: Type.Union([Type.String(), Type.Null()]),
  decidedBy: Type.Union([Type.String(), Type.Null()]),
  decidedAt: Type.Union([Type.String(), Type.Null()]),
  reason: Type.Union([Type.String(), Type.Null()]),
  version: Type.Integer(),
  createdAt: Type.String(),
  updatedAt: Type.String(),
});
const Verdict = Type.Object(
  { reason: Type.Optional(Type.String({ minLength: 1, maxLength: 2000 })) },
  { additionalProperties: false },
);

const definitionView = ({ worldId: _, ...d }: DecisionDefinition) => d;
const decisionView = ({ worldId: _, ...d }: Decision) => d;

const same = (d: DecisionDefinition, input: DecisionInput) =>
  JSON.stringify([d.rule ?? null, d.alertType ?? null, d.actionType, d.approval, d.description ?? null]) ===
    JSON.stringify([
      input.rule ?? null,
      input.alertType ?? null,
      input.actionType,
      input.approval,
      input.description ?? null,
    ]) &&
  JSON.stringify(Object.entries(d.parameters).sort()) === JSON.stringify(Object.entries(input.parameters).sort());

/**
 * Decision definitions (`PUT|GET|DELETE /v1/worlds/{world}/decision-definitions/{name}`, list),
 * the decisions they made (`GET …/decisions`, `GET …/decisions/{id}`) and the manual verdicts
 * (`POST …/decisions/{id}/approve|reject`).
 */
export async function decisionRoutes(fastify: FastifyInstance, engine: Engine) {
  const app = fastify.withTypeProvider<TypeBoxTypeProvider>();

  const writer = definitionResource(fastify, engine, {
    kind: 'decision',
    path: 'decision-definitions',
    what: 'decision definition',
    tag: 'decisions',
    View: DefinitionView,
    view: definitionView,
    table: {
      list: listDecisionDefinitions,
      get: getDecisionDefinition,
      listAt: listDecisionDefinitionsAt,
      getAt: getDecisionDefinitionAt,
    },
    put: {
      summary: 'Define or change what a raised alert turns into',
      description:
        'On a rule (or every rule of an alert type): an action type of the replicated schema and a CEL expression per parameter. Every alert raised afterwards makes one decision (decision.made); automatic approval starts the action at once (decision.executed), manual waits for approve or reject. Unknown references are a 422 naming the path.',
      body: Body,
      input: (body): DecisionInput => ({ ...body }),
      stored: (d) => ({
        rule: d.rule,
        alertType: d.alertType,
        actionType: d.actionType,
        parameters: d.parameters,
        approval: d.approval,
        description: d.description,
      }),
      same,
      save: async (tx, { world, name, all, input, version, document, next }) => {
        const { derived, rules } = await definitionsOf(tx, world, { decisions: all });
        const checked = resolveDecision(
          name,
          input,
          version,
          document,
          new Map(rules.map((r) => [r.name, { objectType: r.objectType, alertType: r.alertType, state: r.state }])),
          new Map(derived.map((d) => [d.name, { objectType: d.objectType, state: d.state }])),
        );
        if (!checked.resolved) throw new Unprocessable(`decision definition ${name} cannot be defined`, checked.errors);
        return saveDecisionDefinition(tx, { ...input, ...next });
      },
    },
    get: { summary: 'Read a decision definition' },
    list: {
      summary: 'List the decision definitions of a world',
      key: 'decisionDefinitions',
      query: { rule: Type.Optional(Type.String({ pattern: NAME })) },
      filter:
        ({ rule }) =>
        (d) =>
          rule === undefined || d.rule === rule,
    },
    delete: {
      summary: 'Delete a decision definition (the decisions it made stay)',
      remove: (tx, { world, name }) => deleteDecisionDefinition(tx, world, name),
    },
  });

  app.get(
    '/v1/worlds/:world/decisions',
    {
      preHandler: app.authorize({ role: 'viewer' }),
      schema: {
        tags: ['decisions'],
        summary: 'List decisions, newest first',
        params: WorldParams,
        headers: ReadHeaders,
        querystring: Type.Object(
          {
            status: Type.Optional(Type.Union(DECISION_STATUSES.map((s) => Type.Literal(s)))),
            definition: Type.Optional(Type.String({ pattern: NAME })),
            alertId: Type.Optional(Type.String({ pattern: UUID })),
            cursor: Type.Optional(Type.String({ maxLength: 512 })),
            limit: Type.Integer({ minimum: 1, maximum: 1000, default: 100 }),
            at: Type.Optional(AtState),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({ decisions: Type.Array(DecisionView), next: Type.Union([Type.String(), Type.Null()]) }),
          ...readErrors,
        },
      },
    },
    async (request, reply) => {
      const { world } = request.params;
      const q = request.query;
      const waited = await app.awaitConsistency(request, world);
      const listing = JSON.stringify([q.status, q.definition, q.alertId, q.at]);
      const keyset = idKeyset(q.cursor, listing, q.limit);
      if (!(await provisioned(app.pg, world))) throw notProvisioned(world);
      const point = await app.readPoint(world, q.at);
      const { db, watermark } = await app.readModelDb(request, world, waited, { primaryNow: point !== undefined });
      const { rows } = await db.query<Decision>(
        `SELECT ${DECISION_COLUMNS} FROM ${point ? decisionsAt('$7', '$8') : 'decisions'} d
          WHERE world_id = $1 AND ($2::text IS NULL OR status = $2) AND ($3::text IS NULL OR definition = $3)
            AND ($4::uuid IS NULL OR alert_id = $4) AND ($5::uuid IS NULL OR id < $5)
          ORDER BY id DESC LIMIT $6`,
        [
          world,
          q.status ?? null,
          q.definition ?? null,
          q.alertId ?? null,
          keyset.after,
          q.limit + 1,
          ...(point ? [point.commit, point.moment] : []),
        ],
      );
      const { page, next } = keyset.page(rows);
      await app.consistencyHeader(reply, world, watermark);
      return { decisions: page.map(decisionView), next };
    },
  );

  app.get(
    '/v1/worlds/:world/decisions/:id',
    {
      preHandler: app.authorize({ role: 'viewer' }),
      schema: {
        tags: ['decisions'],
        summary: 'Read a decision',
        params: Type.Object({ world: Type.String({ pattern: WORLD_ID }), id: Type.String({ pattern: UUID }) }),
        headers: ReadHeaders,
        querystring: Type.Object({ at: Type.Optional(AtState) }, { additionalProperties: false }),
        response: { 200: DecisionView, ...readErrors },
      },
    },
    async (request, reply) => {
      const { world, id } = request.params;
      const waited = await app.awaitConsistency(request, world);
      const point = await app.readPoint(world, request.query.at);
      const { db, watermark } = await app.readModelDb(request, world, waited, { primaryNow: point !== undefined });
      const { rows } = await db.query<Decision>(
        point
          ? `SELECT ${DECISION_COLUMNS} FROM ${decisionsAt('$3', '$4')} d
              WHERE world_id = $1 AND id = $2`
          : `SELECT ${DECISION_COLUMNS} FROM decisions WHERE world_id = $1 AND id = $2`,
        point ? [world, id, point.commit, point.moment] : [world, id],
      );
      const decision = rows[0];
      if (!decision) throw new NotFound(`decision ${id} is not in ${world}`);
      await app.consistencyHeader(reply, world, watermark);
      return decisionView(decision);
    },
  );

  for (const verdict of ['approve', 'reject'] as const) {
    app.post(
      `/v1/worlds/:world/decisions/:id/${verdict}`,
      {
        bodyLimit: BODY_LIMITS.small,
        preHandler: app.authorize({ role: 'editor' }),
        // A verdict needs no body: an empty request is an empty verdict.
        preValidation: async (request) => {
          if (request.body === undefined || request.body === null) request.body = {};
        },
        schema: {
          tags: ['decisions'],
          summary:
            verdict === 'approve' ? 'Approve a pending decision: its action starts' : 'Reject a pending decision',
          description:
            'Only a PENDING_APPROVAL decision can be decided (409 otherwise). decision.made is published with who decided; an approval then starts the action (idempotency key decision:<id>) and publishes decision.executed.',
          params: Type.Object({ world: Type.String({ pattern: WORLD_ID }), id: Type.String({ pattern: UUID }) }),
          body: Verdict,
          response: { 200: DecisionView, ...errors },
        },
      },
      async (request, reply) => {
        const { world, id } = request.params;
        const actor = actorOf(request);
        const decided = await inTransaction(app.pg, async (tx) => {
          const { rows } = await tx.query<Decision>(
            `SELECT ${DECISION_COLUMNS} FROM decisions WHERE world_id = $1 AND id = $2 FOR UPDATE`,
            [world, id],
          );
          const decision = rows[0];
          if (!decision) throw new NotFound(`decision ${id} is not in ${world}`);
          if (decision.status !== 'PENDING_APPROVAL') {
            throw new Conflict(`decision ${id} is ${decision.status}, not PENDING_APPROVAL`, {
              status: decision.status,
            });
          }
          const made = await decideManually(tx, engine.ctx, decision, verdict, actor, request.body.reason ?? null);
          await recordAudit(tx, request, {
            action: `decision.${verdict}`,
            result: 'updated',
            worldId: world,
            subject: id,
            detail: { status: made.status },
          });
          return made;
        });
        await app.consistencyHeader(reply, world);
        return decisionView(decided);
      },
    );
  }
  return writer;
}
