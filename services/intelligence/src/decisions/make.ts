import {
  HttpProblem,
  isInfrastructureError,
  newEvent,
  Outbox,
  type Queryable,
  setOwn,
  TOPICS,
  uuidv7,
} from '@onto/shared';
import type pg from 'pg';
import { type Bindings, evaluate } from '../cel/expressions.js';
import type { Alert } from '../rules/alerts.js';
import type { Approval, DecisionStatus, ResolvedDecision } from './model.js';

/** What the actions part of intelligence offers decisions: start an action in the caller's transaction. */
export interface ActionStarter {
  start(
    tx: pg.PoolClient,
    request: {
      worldId: string;
      actionType: string;
      parameters: Record<string, unknown>;
      idempotencyKey: string;
      actor: string;
      causedBy: string | null;
    },
  ): Promise<{ actionId: string; replayed: boolean }>;
}

export type Decision = {
  id: string;
  worldId: string;
  definition: string;
  definitionVersion: number;
  alertId: string;
  rule: string;
  alertType: string;
  objectType: string;
  pk: string;
  actionType: string;
  parameters: Record<string, unknown> | null;
  approval: Approval;
  status: DecisionStatus;
  error: { path?: string; message: string } | null;
  actionId: string | null;
  decidedBy: string | null;
  decidedAt: string | null;
  reason: string | null;
  version: number;
  createdAt: string;
  updatedAt: string;
};

export const DECISION_COLUMNS = `id::text, world_id AS "worldId", definition, definition_version AS "definitionVersion",
  alert_id::text AS "alertId", rule, alert_type AS "alertType", object_type AS "objectType", pk,
  action_type AS "actionType", parameters, approval, status, error, action_id AS "actionId",
  decided_by AS "decidedBy", to_json(decided_at)#>>'{}' AS "decidedAt", reason, version,
  to_json(created_at)#>>'{}' AS "createdAt", to_json(updated_at)#>>'{}' AS "updatedAt"`;

export interface DecisionContext {
  topicPrefix: string;
  actions: ActionStarter | undefined;
}

type Stage = 'made' | 'executed';

function decisionEvent(d: Decision, seq: number, stage: Stage, extra: Record<string, unknown>, causedBy?: string) {
  const key = TOPICS['domain.decisions'].key({ worldId: d.worldId, decisionId: d.id });
  const event = newEvent({
    type: stage === 'made' ? 'decision.made' : 'decision.executed',
    worldId: d.worldId,
    key,
    version: d.version,
    producer: 'intelligence',
    producerSeq: seq,
    causedBy: causedBy ?? null,
    payload: {
      decisionId: d.id,
      definition: d.definition,
      definitionVersion: d.definitionVersion,
      alertId: d.alertId,
      rule: d.rule,
      alertType: d.alertType,
      objectType: d.objectType,
      pk: d.pk,
      actionType: d.actionType,
      parameters: d.parameters,
      approval: d.approval,
      status: d.status,
      decidedBy: d.decidedBy,
      ...(d.reason ? { reason: d.reason } : {}),
      ...(d.error ? { error: d.error } : {}),
      ...(d.actionId ? { actionId: d.actionId } : {}),
      ...extra,
    },
  });
  return { event, key };
}

/** The parameters of a decision, or the first parameter whose expression failed. */
function parametersOf(decision: ResolvedDecision, bindings: Bindings) {
  const parameters: Record<string, unknown> = {};
  for (const p of decision.parameters) {
    const outcome = evaluate(p.program, bindings);
    if ('error' in outcome) return { error: { path: `/parameters/${p.name}`, message: outcome.error } };
    setOwn(parameters, p.name, outcome.value);
  }
  return { parameters };
}

async function update(
  tx: Queryable,
  world: string,
  id: string,
  set: { status: DecisionStatus; actionId?: string; error?: unknown; decidedBy?: string; reason?: string | null },
): Promise<{ decision: Decision; seq: number }> {
  const { rows } = await tx.query<Decision & { seq: string }>(
    `UPDATE decisions SET status = $2, action_id = coalesce($3, action_id), error = $4::jsonb,
            decided_by = coalesce($5, decided_by), decided_at = CASE WHEN $5::text IS NULL THEN decided_at ELSE now() END,
            reason = coalesce($6, reason), version = version + 1, seq = nextval('intelligence_seq'), updated_at = now()
      WHERE world_id = $7 AND id = $1
     RETURNING ${DECISION_COLUMNS}, seq`,
    [
      id,
      set.status,
      set.actionId ?? null,
      set.error === undefined ? null : JSON.stringify(set.error),
      set.decidedBy ?? null,
      set.reason ?? null,
      world,
    ],
  );
  const row = rows[0];
  if (!row) throw new Error(`decision ${id} vanished`);
  const { seq, ...decision } = row;
  return { decision, seq: Number(seq) };
}

/**
 * Starts the decision's action through the actions API, in the caller's transaction, with the
 * idempotency key `decision:<id>` (so a retried approval never starts a second action), and
 * publishes `decision.executed`. A refusal by the actions API (a 4xx: parameters not valid for the
 * action type, say) fails the decision instead of the transaction.
 */
export async function executeDecision(
  tx: pg.PoolClient,
  ctx: DecisionContext,
  decision: Decision,
  actor: string,
  causedBy: string,
): Promise<Decision> {
  let outcome: { status: DecisionStatus; actionId?: string; error?: unknown; replayed?: boolean };
  if (!ctx.actions) {
    outcome = { status: 'FAILED', error: { message: 'actions cannot be started: the actions API is not available' } };
  } else {
    await tx.query('SAVEPOINT decision_action');
    try {
      const started = await ctx.actions.start(tx, {
        worldId: decision.worldId,
        actionType: decision.actionType,
        parameters: decision.parameters ?? {},
        idempotencyKey: `decision:${decision.id}`,
        actor,
        causedBy: null,
      });
      await tx.query('RELEASE SAVEPOINT decision_action');
      outcome = { status: 'EXECUTED', actionId: started.actionId, replayed: started.replayed };
    } catch (error) {
      await tx.query('ROLLBACK TO SAVEPOINT decision_action');
      if (isInfrastructureError(error) || !(error instanceof HttpProblem) || error.status >= 500) throw error;
      const errors = (error.extensions.errors as unknown[] | undefined) ?? undefined;
      outcome = { status: 'FAILED', error: { message: error.message, ...(errors ? { errors } : {}) } };
    }
  }
  const { decision: updated, seq } = await update(tx, decision.worldId, decision.id, {
    status: outcome.status,
    ...(outcome.actionId ? { actionId: outcome.actionId } : {}),
    error: outcome.error ?? null,
  });
  await new Outbox(tx, ctx.topicPrefix).add(
    decisionEvent(
      updated,
      seq,
      'executed',
      outcome.replayed === undefined ? {} : { replayed: outcome.replayed },
      causedBy,
    ),
  );
  return updated;
}

/**
 * Records the decisions that raised alerts call for (one per alert and definition, whatever
 * redelivery does) and publishes `decision.made`; automatic ones are executed at once.
 */
export async function makeDecisions(
  tx: pg.PoolClient,
  ctx: DecisionContext,
  items: { decision: ResolvedDecision; alert: Alert; bindings: Bindings }[],
): Promise<Decision[]> {
  const made: Decision[] = [];
  for (const { decision: def, alert, bindings } of items) {
    const computed = parametersOf(def, bindings);
    const status: DecisionStatus =
      'error' in computed ? 'FAILED' : def.approval === 'automatic' ? 'EXECUTED' : 'PENDING_APPROVAL';
    const { rows } = await tx.query<Decision & { seq: string }>(
      `INSERT INTO decisions (id, world_id, definition, definition_version, alert_id, rule, alert_type, object_type,
                              pk, action_type, parameters, approval, status, error, decided_by, decided_at,
                              version, seq)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::jsonb, $12, $13, $14::jsonb, $15,
               CASE WHEN $15::text IS NULL THEN NULL ELSE now() END, 1, nextval('intelligence_seq'))
       ON CONFLICT (world_id, definition, alert_id) DO NOTHING
       RETURNING ${DECISION_COLUMNS}, seq`,
      [
        uuidv7(),
        alert.worldId,
        def.name,
        def.version,
        alert.id,
        alert.rule,
        alert.alertType,
        alert.objectType,
        alert.pk,
        def.actionType,
        'parameters' in computed ? JSON.stringify(computed.parameters) : null,
        def.approval,
        // Automatic decisions are recorded as pending for an instant: executing moves them on.
        status === 'EXECUTED' ? 'PENDING_APPROVAL' : status,
        'error' in computed ? JSON.stringify(computed.error) : null,
        def.approval === 'automatic' ? `decision:${def.name}` : null,
      ],
    );
    const row = rows[0];
    if (!row) continue;
    const { seq, ...decision } = row;
    const madeEvent = decisionEvent(decision, Number(seq), 'made', status === 'EXECUTED' ? { status: 'APPROVED' } : {});
    await new Outbox(tx, ctx.topicPrefix).add(madeEvent);
    made.push(
      status === 'EXECUTED'
        ? await executeDecision(tx, ctx, decision, `decision:${def.name}`, madeEvent.event.event_id)
        : decision,
    );
  }
  return made;
}

/** A person's approval or rejection of a pending decision: `decision.made` again, with who decided. */
export async function decideManually(
  tx: pg.PoolClient,
  ctx: DecisionContext,
  decision: Decision,
  verdict: 'approve' | 'reject',
  actor: string,
  reason: string | null,
): Promise<Decision> {
  const { decision: decided, seq } = await update(tx, decision.worldId, decision.id, {
    status: verdict === 'approve' ? 'PENDING_APPROVAL' : 'REJECTED',
    decidedBy: actor,
    reason,
  });
  const made = decisionEvent(decided, seq, 'made', verdict === 'approve' ? { status: 'APPROVED' } : {});
  await new Outbox(tx, ctx.topicPrefix).add(made);
  return verdict === 'approve' ? executeDecision(tx, ctx, decided, actor, made.event.event_id) : decided;
}
