import {
  Conflict,
  type EventEnvelope,
  type EventType,
  NotFound,
  newEvent,
  Outbox,
  type OutboxMessage,
  parseStepCompleted,
  parseStepRefused,
  type StepCommand,
  type StepPhase,
  TOPICS,
  Unprocessable,
  uuidv7,
} from '@onto/shared';
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import type pg from 'pg';
import { checkParameters, compensationOf, fingerprint, naturalKey, resolveCommands, sagaVersions } from './plan.js';
import {
  type ActionRow,
  type ActionStatus,
  advanceAction,
  findKey,
  insertAction,
  insertKey,
  type KeyRecord,
  lockAction,
  lockStalledSteps,
  type RecordedRefusal,
  type StepRow,
  skipPending,
  stepsOf,
  updateStep,
} from './repository.js';

export interface StartRequest {
  worldId: string;
  actionType: string;
  /** As the caller gave them: checked here against the action type. */
  parameters: Record<string, unknown>;
  idempotencyKey: string;
  /** Who runs the action: the key's scope, the history's actor. */
  actor: string;
  /** The event that caused the action (a decision's), kept with it. */
  causedBy: string | null;
}

export interface Started {
  actionId: string;
  /** The key (or the action type's key parameters) named an action already started. */
  replayed: boolean;
  /** The record of the caller's key, with the response to answer (and replay). */
  record: KeyRecord;
}

/** The JSON an action answers with: POST (202), GET, and the replay of a POST. */
export function actionView(action: ActionRow, steps: StepRow[]) {
  return {
    id: action.id,
    world: action.worldId,
    actionType: action.actionType,
    status: action.status,
    parameters: action.parameters,
    schemaVersion: action.schemaVersion,
    actor: action.actor,
    idempotencyKey: action.idempotencyKey,
    causedBy: action.causedBy,
    refusal: action.refusal,
    createdAt: action.createdAt,
    updatedAt: action.updatedAt,
    finishedAt: action.finishedAt,
    steps: steps.map((s) => ({
      n: s.n,
      command: s.command,
      state: s.state,
      result: s.result,
      refusal: s.refusal,
      compensation: s.compensation,
      compensationResult: s.compensationResult,
      compensationRefusal: s.compensationRefusal,
    })),
  };
}

export const actionUrl = (worldId: string, id: string) => `/v1/worlds/${worldId}/actions/${id}`;
export const callerScope = (actor: string) => `caller:${actor}`;

/**
 * Actions as sagas over domain.actions (docs/adr/0011). `start` records an action, its planned
 * steps and its idempotency key(s), and enqueues `action.requested` and the first
 * `action.step.requested`, all in the caller's transaction. `applyReplies` is the effect of data's
 * answers: each advances the saga by one transition — the next step, the compensation of the
 * completed steps in reverse order, or a final status — with its events, in the inbox transaction.
 */
export class ActionSagas {
  constructor(
    private readonly app: FastifyInstance,
    private readonly keyTtlMs: number,
    private readonly log: FastifyBaseLogger,
  ) {}

  private event(
    type: EventType,
    action: { worldId: string; id: string },
    revision: number,
    causedBy: string | null,
    payload: Record<string, unknown>,
    eventId?: string,
  ): OutboxMessage {
    const key = TOPICS['domain.actions'].key({ worldId: action.worldId, actionId: action.id });
    return {
      event: newEvent({
        type,
        worldId: action.worldId,
        key,
        version: revision,
        producer: 'intelligence',
        producerSeq: revision,
        causedBy,
        payload: { actionId: action.id, ...payload },
        ...(eventId ? { eventId } : {}),
      }),
      key,
    };
  }

  private stepRequested(
    action: ActionRow,
    revision: number,
    n: number,
    phase: StepPhase,
    commands: StepCommand[],
    causedBy: string | null,
    eventId: string,
  ): OutboxMessage {
    return this.event(
      'action.step.requested',
      action,
      revision,
      causedBy,
      {
        actionType: action.actionType,
        step: n,
        phase,
        commands,
        actor: action.actor,
        schemaVersion: action.schemaVersion,
      },
      eventId,
    );
  }

  /** The key's record when it names an action already; 422 when it named another request. */
  private async replayOf(tx: pg.PoolClient, req: StartRequest, print: string): Promise<KeyRecord | null> {
    const existing = await findKey(tx, req.worldId, callerScope(req.actor), req.idempotencyKey);
    if (!existing) return null;
    if (existing.fingerprint !== print) {
      throw new Unprocessable('this Idempotency-Key was used for another request', [
        {
          path: 'header/idempotency-key',
          message: `was used within its lifetime for a request with another action type or other parameters (action ${existing.actionId})`,
        },
      ]);
    }
    return existing;
  }

  /**
   * What an action would do, without doing it: the action type, its parameters checked and the
   * commands its edits resolve to, or the faults (validateOnly answers this; start runs it).
   */
  async plan(tx: pg.PoolClient, worldId: string, actionType: string, parameters: unknown) {
    const { rowCount } = await tx.query('SELECT 1 FROM worlds WHERE id = $1', [worldId]);
    if (!rowCount) throw new NotFound(`world ${worldId} does not exist here (not provisioned in intelligence)`);
    const schema = await this.app.schemaReplica.current(tx, worldId);
    const action = Object.hasOwn(schema.document.actionTypes, actionType)
      ? schema.document.actionTypes[actionType]
      : undefined;
    if (!action) {
      throw new NotFound(
        `action type ${actionType} is not in the schema of world ${worldId} (version ${schema.version} applied here)`,
      );
    }
    const checked = checkParameters(action, parameters);
    const resolved = checked.errors.length === 0 ? resolveCommands(action, checked.parameters) : undefined;
    const errors = [...checked.errors, ...(resolved?.errors ?? [])];
    return { action, schema, checked, resolved, errors };
  }

  async start(tx: pg.PoolClient, req: StartRequest): Promise<Started> {
    const { worldId } = req;
    const print = fingerprint(worldId, req.actionType, req.parameters);
    const replay = await this.replayOf(tx, req, print);
    if (replay) return { actionId: replay.actionId, replayed: true, record: replay };

    const { action, schema, checked, resolved, errors } = await this.plan(tx, worldId, req.actionType, req.parameters);
    if (errors.length > 0 || !resolved) {
      throw new Unprocessable(`the parameters do not fit action type ${req.actionType}`, errors.slice(0, 50));
    }
    const natural = naturalKey(action, checked.parameters);
    const naturalScope = `type:${req.actionType}`;
    if (natural) {
      const existing = await findKey(tx, worldId, naturalScope, natural);
      if (existing) return this.naturalReplay(existing, print, action.idempotencyKey ?? []);
    }

    const id = uuidv7();
    const requested = uuidv7();
    const firstStep = uuidv7();
    await tx.query('SAVEPOINT action_start');
    const { action: row, steps } = await insertAction(
      tx,
      {
        worldId,
        id,
        actionType: req.actionType,
        parameters: checked.parameters,
        schemaVersion: schema.version,
        actor: req.actor,
        idempotencyKey: req.idempotencyKey,
        causedBy: req.causedBy,
        createdAt: new Date().toISOString(),
      },
      resolved.commands,
      firstStep,
    );
    const response = {
      status: 202,
      body: actionView(row, steps),
      headers: { location: actionUrl(worldId, id) },
    };
    const record = { fingerprint: print, actionId: id, response };
    const mine = await insertKey(
      tx,
      { worldId, scope: callerScope(req.actor), key: req.idempotencyKey, ...record },
      this.keyTtlMs,
    );
    const naturalTaken =
      mine && natural
        ? !(await insertKey(tx, { worldId, scope: naturalScope, key: natural, ...record }, this.keyTtlMs))
        : false;
    if (!mine || naturalTaken) {
      // A concurrent request with the same key committed first (its insert made ours wait).
      await tx.query('ROLLBACK TO SAVEPOINT action_start');
      const again = await this.replayOf(tx, req, print);
      if (again) return { actionId: again.actionId, replayed: true, record: again };
      const other = natural ? await findKey(tx, worldId, naturalScope, natural) : null;
      if (other) return this.naturalReplay(other, print, action.idempotencyKey ?? []);
      throw new Conflict('a concurrent request with this idempotency key is in progress; retry it');
    }
    const [first] = resolved.commands as [StepCommand, ...StepCommand[]];
    await new Outbox(tx, this.app.topicPrefix).add([
      // caused_by stays null: the cause (a decision's event) is unknown to data, which would park it.
      this.event(
        'action.requested',
        row,
        1,
        null,
        {
          actionType: req.actionType,
          parameters: checked.parameters,
          steps: resolved.commands,
          actor: req.actor,
          cause: req.causedBy,
        },
        requested,
      ),
      this.stepRequested(row, 1, 0, 'forward', [first], requested, firstStep),
    ]);
    await tx.query('RELEASE SAVEPOINT action_start');
    return { actionId: id, replayed: false, record: mine };
  }

  /** The action type's key parameters name an action already: it, if the request is the same. */
  private naturalReplay(existing: KeyRecord, print: string, names: string[]): Started {
    if (existing.fingerprint !== print) {
      throw new Conflict(
        `an execution with the same ${names.join(', ')} exists (action ${existing.actionId}) with other parameters`,
        { actionId: existing.actionId },
      );
    }
    return { actionId: existing.actionId, replayed: true, record: existing };
  }

  /** The effect of events on domain.actions: data's replies advance their sagas; the rest is ours. */
  async applyReplies(tx: pg.PoolClient, events: { event: EventEnvelope }[]): Promise<void> {
    for (const { event } of events) {
      if (event.type === 'action.step.completed') await this.onReply(tx, event, 'completed');
      else if (event.type === 'action.step.refused') await this.onReply(tx, event, 'refused');
    }
  }

  private async onReply(tx: pg.PoolClient, event: EventEnvelope, outcome: 'completed' | 'refused') {
    const reply = outcome === 'completed' ? parseStepCompleted(event.payload) : parseStepRefused(event.payload);
    const action = await lockAction(tx, event.world_id, reply.actionId);
    if (!action) {
      this.log.warn({ actionId: reply.actionId, eventId: event.event_id }, 'a reply for an unknown action');
      return;
    }
    const steps = await stepsOf(tx, action.worldId, action.id);
    const step = steps[reply.step];
    const awaited = reply.phase === 'forward' ? 'REQUESTED' : 'COMPENSATING';
    if (!step || step.state !== awaited || step.requestEvent !== event.caused_by) {
      this.log.info({ actionId: action.id, step: reply.step, eventId: event.event_id }, 'a stale step reply; ignored');
      return;
    }
    const n = step.n;
    if (reply.phase === 'forward' && 'results' in reply) {
      await this.setStep(tx, action, step, {
        state: 'COMPLETED',
        result: reply.results,
        requestEvent: null,
        replySeq: reply.seq,
      });
      const next = steps[n + 1];
      if (next) {
        const id = uuidv7();
        await this.setStep(tx, action, next, { state: 'REQUESTED', requestEvent: id });
        const revision = await advanceAction(tx, action.worldId, action.id, 'RUNNING');
        await new Outbox(tx, this.app.topicPrefix).add(
          this.stepRequested(action, revision, next.n, 'forward', [next.command], event.event_id, id),
        );
        return;
      }
      await this.finish(tx, action, 'COMPLETED', event);
      return;
    }
    if (reply.phase === 'forward' && 'reason' in reply) {
      await this.setStep(tx, action, step, {
        state: 'REFUSED',
        refusal: reply.reason,
        requestEvent: null,
      });
      await skipPending(tx, action.worldId, action.id);
      await this.compensate(tx, action, steps, n - 1, event, { ...reply.reason, step: n, phase: 'forward' });
      return;
    }
    if ('results' in reply) {
      await this.setStep(tx, action, step, {
        state: 'COMPENSATED',
        compensationResult: reply.results,
        requestEvent: null,
        replySeq: reply.seq,
      });
      await this.compensate(tx, action, steps, n - 1, event);
      return;
    }
    await this.setStep(tx, action, step, {
      state: 'COMPENSATION_REFUSED',
      compensationRefusal: reply.reason,
      requestEvent: null,
    });
    await this.finish(tx, action, 'FAILED', event, { failure: { ...reply.reason, step: n, phase: 'compensation' } });
  }

  /**
   * Asks again for the steps whose reply has not come for `olderThanMs` (a request or reply
   * dead-lettered, say): under a new event id, caused by nothing so that it never parks. data
   * answers a step it applied with its recorded reply, so asking again never applies it twice;
   * a late reply to the old request is stale and ignored. Returns how many were asked again.
   */
  async retryStalled(tx: pg.PoolClient, olderThanMs: number): Promise<number> {
    const stalled = await lockStalledSteps(tx, olderThanMs);
    for (const { worldId, actionId, n, requestEvent } of stalled) {
      const action = await lockAction(tx, worldId, actionId);
      const step = (await stepsOf(tx, worldId, actionId))[n];
      // A reply may have moved the saga on between the query and the lock.
      if (!action || !step || step.requestEvent !== requestEvent) continue;
      if (step.state !== 'REQUESTED' && step.state !== 'COMPENSATING') continue;
      const phase = step.state === 'REQUESTED' ? 'forward' : 'compensation';
      const commands = phase === 'forward' ? [step.command] : (step.compensation ?? []);
      const id = uuidv7();
      await this.setStep(tx, action, step, { requestEvent: id });
      const revision = await advanceAction(tx, worldId, actionId, action.status);
      await new Outbox(tx, this.app.topicPrefix).add(
        this.stepRequested(action, revision, n, phase, commands, null, id),
      );
      this.log.warn({ actionId, step: n, phase }, 'no reply to an action step; asked again');
    }
    return stalled.length;
  }

  /** Writes a change of a step, and into the step as read, which later decisions look at. */
  private async setStep(
    tx: pg.PoolClient,
    action: ActionRow,
    step: StepRow,
    change: Partial<Omit<StepRow, 'n' | 'command'>> & { replySeq?: number },
  ) {
    await updateStep(tx, action.worldId, action.id, step.n, change);
    const { replySeq: _, ...seen } = change;
    Object.assign(step, seen);
  }

  /**
   * Undoes the completed steps from `from` down, one at a time: the first that needs undoing is
   * asked of data; those that changed nothing are marked undone at once; when none is left the
   * action is COMPENSATED.
   */
  private async compensate(
    tx: pg.PoolClient,
    action: ActionRow,
    steps: StepRow[],
    from: number,
    cause: EventEnvelope,
    refusal?: RecordedRefusal,
  ) {
    for (let k = from; k >= 0; k--) {
      const step = steps[k];
      if (step?.state !== 'COMPLETED') continue;
      const result = step.result?.[0];
      const undo = result ? compensationOf(step.command, result, this.versionsBefore(steps, k)) : null;
      if (!undo) {
        await this.setStep(tx, action, step, { state: 'COMPENSATED', compensation: null });
        continue;
      }
      const id = uuidv7();
      await this.setStep(tx, action, step, {
        state: 'COMPENSATING',
        compensation: undo,
        requestEvent: id,
      });
      const revision = await advanceAction(tx, action.worldId, action.id, 'COMPENSATING', refusal);
      await new Outbox(tx, this.app.topicPrefix).add(
        this.stepRequested(action, revision, k, 'compensation', undo, cause.event_id, id),
      );
      return;
    }
    await this.finish(tx, action, 'COMPENSATED', cause, {}, refusal);
  }

  /**
   * The versions the saga's writes left when step k is undone: every forward step that
   * completed, in order, then the undos already done (of the steps after k), latest last.
   */
  private versionsBefore(steps: StepRow[], k: number) {
    const done = new Set<StepRow['state']>(['COMPLETED', 'COMPENSATING', 'COMPENSATED', 'COMPENSATION_REFUSED']);
    const forward = steps
      .filter((s) => done.has(s.state) && s.result)
      .map((s) => ({ commands: [s.command], results: s.result ?? [] }));
    const undone = steps
      .filter((s) => s.n > k && s.compensation && s.compensationResult)
      .sort((a, b) => b.n - a.n)
      .map((s) => ({ commands: s.compensation ?? [], results: s.compensationResult ?? [] }));
    return sagaVersions([...forward, ...undone]);
  }

  private async finish(
    tx: pg.PoolClient,
    action: ActionRow,
    status: Extract<ActionStatus, 'COMPLETED' | 'COMPENSATED' | 'FAILED'>,
    cause: EventEnvelope,
    extra: Record<string, unknown> = {},
    refusal?: RecordedRefusal,
  ) {
    const revision = await advanceAction(tx, action.worldId, action.id, status, refusal);
    const type =
      status === 'COMPLETED' ? 'action.completed' : status === 'COMPENSATED' ? 'action.compensated' : 'action.failed';
    const steps = await stepsOf(tx, action.worldId, action.id);
    await new Outbox(tx, this.app.topicPrefix).add(
      this.event(type, action, revision, cause.event_id, {
        actionType: action.actionType,
        status,
        refusal: refusal ?? action.refusal,
        steps: steps.map((s) => ({ n: s.n, state: s.state })),
        ...extra,
      }),
    );
  }
}
