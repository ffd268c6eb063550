import {
  type CommandResult,
  type EventEnvelope,
  HttpProblem,
  isConflict,
  isInfrastructureError,
  NotFound,
  newEvent,
  Outbox,
  PreconditionFailed,
  parseStepRequested,
  type StepCommand,
  type StepRefusal,
  type StepRequested,
  TOPICS,
  Unavailable,
} from '@onto/shared';
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import type pg from 'pg';
import type { Origin } from '../events.js';
import { checkPreconditions } from '../http/requests.js';
import { putLink, removeLink } from '../links/change.js';
import { deleteObject, writeObject } from '../objects/change.js';
import { applyPatch, checkObject } from '../objects/model.js';
import { lockWorldShared } from '../worlds/locks.js';

/** A command's outcome and data's write sequence after it (0 when it wrote nothing). */
interface Applied {
  result: CommandResult;
  seq: number;
}

/** The version a head must be at (live or tombstone) for a command with `ifVersion`. */
function expectVersion(what: string, ifVersion: number | undefined, head: { version: number } | null) {
  if (ifVersion === undefined) return;
  const current = head?.version ?? null;
  if (current !== ifVersion) {
    throw new PreconditionFailed(`${what} is at version ${current ?? 'none'}, not ${ifVersion}`, {
      currentVersion: current,
    });
  }
}

const beforeOf = (head: { version: number; deleted: boolean; properties?: Record<string, unknown> | null } | null) =>
  head ? { version: head.version, deleted: head.deleted, properties: head.properties ?? null } : null;

/** A write's outcome; one that changed nothing advanced no write sequence. */
const outcome = (
  op: StepCommand['op'],
  w: { changed: boolean; version: number; seq: number; before: Parameters<typeof beforeOf>[0] },
): Applied => ({
  result: { op, changed: w.changed, version: w.version, before: beforeOf(w.before) },
  seq: w.changed ? w.seq : 0,
});

/** Which link a link command is about, and the version check it asks for. */
const linkCommand = (c: Extract<StepCommand, { op: 'createLink' | 'deleteLink' }>) => ({
  linkType: c.linkType,
  fromPk: c.from,
  toPk: c.to,
  check: (head: { version: number } | null) =>
    expectVersion(`link ${c.linkType} ${c.from} → ${c.to}`, c.ifVersion, head),
});

/** One command through data's write path, in the caller's transaction. */
async function applyCommand(
  app: FastifyInstance,
  tx: pg.PoolClient,
  worldId: string,
  c: StepCommand,
  origin: Origin,
): Promise<Applied> {
  const base = { worldId, origin, topicPrefix: app.topicPrefix, via: 'action' as const };
  switch (c.op) {
    case 'createObject':
    case 'modifyObject':
    case 'replaceObject': {
      const what = `${c.objectType} ${c.pk}`;
      const w = await writeObject(app, tx, {
        ...base,
        typeName: c.objectType,
        pk: c.pk,
        check: (head) => {
          if (c.op === 'createObject') checkPreconditions({ ifMatch: undefined, createOnly: true }, head, what);
          else if (c.op === 'modifyObject' && (head === null || head.deleted)) {
            throw new NotFound(`${what} does not exist in ${worldId}`);
          }
          if (c.op !== 'createObject') expectVersion(what, c.ifVersion, head);
        },
        decide: (type, head) =>
          c.op === 'modifyObject'
            ? applyPatch(type, head?.properties ?? {}, c.properties, c.pk)
            : checkObject(type, c.properties, c.pk),
      });
      return outcome(c.op, w);
    }
    case 'deleteObject': {
      const d = await deleteObject(app, tx, {
        ...base,
        typeName: c.objectType,
        pk: c.pk,
        check: (head) => expectVersion(`${c.objectType} ${c.pk}`, c.ifVersion, head),
      });
      return {
        result: {
          op: c.op,
          changed: true,
          version: d.version,
          before: beforeOf(d.before),
          removedLinks: d.removedLinks.map((l) => ({
            linkType: l.linkType,
            from: l.fromPk,
            to: l.toPk,
            version: l.version + 1,
          })),
        },
        seq: d.seq,
      };
    }
    case 'createLink': {
      const l = await putLink(app, tx, {
        ...base,
        ...linkCommand(c),
      });
      return outcome(c.op, l);
    }
    case 'deleteLink': {
      const l = await removeLink(app, tx, {
        ...base,
        ...linkCommand(c),
      });
      return outcome(c.op, { ...l, changed: true });
    }
  }
}

type Reply =
  | { outcome: 'completed'; payload: { results: CommandResult[]; seq: number } }
  | { outcome: 'refused'; payload: { reason: StepRefusal } };

/**
 * Applies the commands of one step all or none: under a savepoint, so that a refused command
 * undoes the ones before it and leaves the rest of the consumer's transaction alone. A refusal
 * is what the write path says about the request (4xx); a conflict or an unreachable store is
 * thrown, so the consumer retries the event.
 */
async function applyStep(
  app: FastifyInstance,
  tx: pg.PoolClient,
  event: EventEnvelope,
  step: StepRequested,
  log: FastifyBaseLogger,
): Promise<Reply> {
  const origin: Origin = {
    actor: step.actor,
    requestId: `action:${step.actionId}:${step.phase}:${step.step}`,
    causedBy: event.event_id,
  };
  await tx.query('SAVEPOINT action_step');
  const results: CommandResult[] = [];
  let seq = 0;
  let index = 0;
  try {
    await lockWorldShared(tx, event.world_id);
    for (const [i, command] of step.commands.entries()) {
      index = i;
      const applied = await applyCommand(app, tx, event.world_id, command, origin);
      results.push(applied.result);
      seq = Math.max(seq, applied.seq);
    }
    await tx.query('RELEASE SAVEPOINT action_step');
    return { outcome: 'completed', payload: { results, seq } };
  } catch (error) {
    await tx.query('ROLLBACK TO SAVEPOINT action_step');
    if (isInfrastructureError(error) || isConflict(error)) throw error;
    if (error instanceof HttpProblem && error.status < 500) {
      const errors = error.extensions.errors;
      return {
        outcome: 'refused',
        payload: {
          reason: {
            status: error.status,
            code: error.slug,
            message: error.detail,
            command: index,
            ...(errors ? { errors } : {}),
          },
        },
      };
    }
    // Anything else is refused rather than retried for ever: the saga compensates what it did.
    log.error({ err: error, actionId: step.actionId, step: step.step }, 'an action step failed');
    return {
      outcome: 'refused',
      payload: {
        reason: { status: 500, code: 'internal', message: 'data failed to apply the command', command: index },
      },
    };
  }
}

/**
 * The effect of `action.step.requested`: the step applied (or refused) and the reply enqueued in
 * the inbox transaction, caused by the request. A step already applied (under another event)
 * gets its recorded reply again. Every other event of domain.actions is only recorded.
 */
export function applyActionEvents(app: FastifyInstance, log: FastifyBaseLogger) {
  return async (tx: pg.PoolClient, events: { event: EventEnvelope }[]): Promise<void> => {
    for (const { event } of events) {
      if (event.type !== 'action.step.requested') continue;
      const step = parseStepRequested(event.payload);
      const id = { actionId: step.actionId, step: step.step, phase: step.phase };
      const { rows } = await tx.query<{ outcome: Reply['outcome']; reply: Reply['payload'] }>(
        `SELECT outcome, reply FROM action_steps
          WHERE world_id = $1 AND action_id = $2 AND step = $3 AND phase = $4`,
        [event.world_id, step.actionId, step.step, step.phase],
      );
      let reply = rows[0] ? ({ outcome: rows[0].outcome, payload: rows[0].reply } as Reply) : undefined;
      if (!reply) {
        if (step.schemaVersion > 0) {
          // Planned on a schema this replica may not have yet: wait for it, bounded.
          await app.schemaReplica.awaitVersion(event.world_id, step.schemaVersion).catch((err) => {
            if (!(err instanceof Unavailable)) throw err;
          });
        }
        reply = await applyStep(app, tx, event, step, log);
        await tx.query(
          `INSERT INTO action_steps (world_id, action_id, step, phase, request_id, outcome, reply)
           VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb)`,
          [
            event.world_id,
            step.actionId,
            step.step,
            step.phase,
            event.event_id,
            reply.outcome,
            JSON.stringify(reply.payload),
          ],
        );
      }
      const key = TOPICS['domain.actions'].key({ worldId: event.world_id, actionId: step.actionId });
      await new Outbox(tx, app.topicPrefix).add({
        event: newEvent({
          type: reply.outcome === 'completed' ? 'action.step.completed' : 'action.step.refused',
          worldId: event.world_id,
          key,
          version: event.version,
          producer: 'data',
          producerSeq: reply.outcome === 'completed' ? reply.payload.seq : 0,
          causedBy: event.event_id,
          payload: { ...id, ...reply.payload },
        }),
        key,
      });
    }
  };
}
